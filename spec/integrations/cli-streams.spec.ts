/**
 * `monglock status --streams` and `watch --streams`: which processes wait on a collection through
 * monglock's change stream, read from `$currentOp`; on a server that refuses `$currentOp`, one
 * line that says why, the command still done.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { Binary, Long, UUID, type Collection, type Document } from 'mongodb';
import { writeLock } from '../../lib';
import { lockChanges } from '../../lib/waiting/change-feed';
import type { ListedLock } from '../../lib/integrations/cli/lock-listing';
import { isLockFeed, lockStreamsOf, renderStreams, streamChanges, type StreamReport } from '../../lib/integrations/cli/stream-listing';
import { freshCollection, mongoBackend, requireCapability } from '../support/fixture';
import { runCli as run, watchCli } from '../support/cli-process';

// Documents shaped like the manual's $currentOp output (an active getMore op with its client and
// metadata; an idle cursor: host, ns, lsid, planSummary, cursor), as the CLI reads them (promoteLongs: false).
const HOST = 'db1.example.net:27017';
const session = (): Document => ({ id: new UUID(), uid: new Binary(Buffer.alloc(32, 7)) });
const opened = new Date('2026-11-27T13:10:00.000Z');
const used = new Date('2026-11-27T13:20:01.000Z');

function aggregate(db: string, collection: string | number, pipeline: Document[]): Document {
  return { aggregate: collection, pipeline, cursor: {}, lsid: session(), $clusterTime: { clusterTime: new Long(1, 1_790_000_000), signature: {} }, $db: db };
}

function cursorOf(id: Long, originatingCommand: Document, pinnedBy?: Long): Document {
  return {
    cursorId: id,
    createdDate: opened,
    lastAccessDate: used,
    nDocsReturned: Long.fromInt(0),
    nBatchesReturned: Long.fromInt(12),
    noCursorTimeout: false,
    tailable: true,
    awaitData: true,
    originatingCommand,
    ...(pinnedBy && { operationUsingCursorId: pinnedBy }),
  };
}

function getMoreOp(id: Long, originatingCommand: Document, client: { address: string; appName: string; driver: string }): Document {
  const opid = Long.fromInt(90_211);
  const [collection, db] = [String(originatingCommand.aggregate), String(originatingCommand.$db)];
  return {
    type: 'op',
    host: HOST,
    desc: 'conn1741',
    connectionId: 1741,
    client: client.address,
    appName: client.appName,
    clientMetadata: {
      ...(client.appName && { application: { name: client.appName } }),
      driver: { name: 'nodejs', version: client.driver },
      os: { type: 'Linux', name: 'linux', architecture: 'x64', version: '6.8.0' },
      platform: 'Node.js v20.20.2, LE (unified)',
    },
    active: true,
    currentOpTime: '2026-11-27T13:20:01.112+00:00',
    effectiveUsers: [{ user: 'orders', db: 'admin' }],
    opid,
    lsid: session(),
    secs_running: Long.fromInt(0),
    microsecs_running: Long.fromInt(412_003),
    op: 'getmore',
    ns: `${db}.${collection}`,
    command: { getMore: id, collection, maxTimeMS: 1000, lsid: session(), $db: db },
    planSummary: 'COLLSCAN',
    cursor: cursorOf(id, originatingCommand, opid),
    numYields: 0,
    locks: {},
    waitingForLock: false,
    lockStats: {},
  };
}

function idleCursor(id: Long, originatingCommand: Document): Document {
  const ns = `${String(originatingCommand.$db)}.${String(originatingCommand.aggregate ?? originatingCommand.find)}`;
  return { type: 'idleCursor', host: HOST, ns, lsid: session(), planSummary: 'COLLSCAN', cursor: cursorOf(id, originatingCommand) };
}

const monglockStream = (db: string, collection: string, field = 'lock'): Document => aggregate(db, collection, [{ $changeStream: {} }, ...lockChanges(field)]);

describe('monglock status --streams', function () {
  this.timeout(60_000);

  it("turns a $currentOp answer into monglock's change streams on the collection: a getMore's client, app and driver, an idle cursor without them; another change stream, another namespace's and a plain cursor are not listed", () => {
    const ids = Array.from({ length: 9 }, (_, i) => Long.fromString(`84626421817846697${String(i).padStart(2, '0')}`));
    const app = { address: '198.51.100.7:53412', appName: 'orders-api', driver: '6.21.0' };
    const ops = [
      getMoreOp(ids[0]!, monglockStream('shop', 'orders'), app),
      idleCursor(ids[1]!, monglockStream('shop', 'orders')),
      // Not monglock's: a user's change stream on the collection, and one that projects documentKey alone but filters on another path.
      getMoreOp(ids[2]!, aggregate('shop', 'orders', [{ $changeStream: { fullDocument: 'updateLookup' } }, { $match: { operationType: 'insert' } }]), { address: '198.51.100.9:40110', appName: 'audit', driver: '6.9.0' }),
      idleCursor(ids[3]!, aggregate('shop', 'orders', [{ $changeStream: {} }, { $match: { operationType: 'update', $expr: { $eq: ['$fullDocument.kind', 'lock'] } } }, { $project: { documentKey: 1 } }])),
      // monglock's, on another lock field of the collection.
      idleCursor(ids[4]!, monglockStream('shop', 'orders', 'lease')),
      // monglock's, on another namespace: another collection, the same collection name in another database, a database-wide stream.
      getMoreOp(ids[5]!, monglockStream('shop', 'invoices'), app),
      idleCursor(ids[6]!, monglockStream('archive', 'orders')),
      idleCursor(ids[7]!, aggregate('shop', 1, [{ $changeStream: {} }, ...lockChanges('lock')])),
      // A plain cursor on the collection, and a getMore that has not reached its cursor yet.
      idleCursor(ids[8]!, { find: 'orders', filter: { lock: { $exists: true } }, batchSize: 2, lsid: session(), $db: 'shop' }),
      { type: 'op', host: HOST, client: '198.51.100.7:53413', op: 'getmore', ns: 'shop.orders', command: { getMore: ids[0], collection: 'orders', $db: 'shop' } },
    ];
    const { streams, others } = lockStreamsOf(ops, { db: 'shop', collection: 'orders' }, 'lock');
    expect(streams).to.deep.equal([
      { cursorId: '8462642181784669700', state: 'getMore', client: '198.51.100.7:53412', appName: 'orders-api', driver: 'nodejs 6.21.0', openedAt: opened, lastUsedAt: used },
      { cursorId: '8462642181784669701', state: 'idle', client: null, appName: null, driver: null, openedAt: opened, lastUsedAt: used },
    ]);
    expect(others, "the user's stream, the look-alike and monglock's on field lease").to.equal(3);
    expect(lockStreamsOf(ops, { db: 'shop', collection: 'orders' }, 'lease').streams.map((row) => row.cursorId)).to.deep.equal(['8462642181784669704']);
  });

  it("recognises monglock's waiting filter (lockChanges) by its lock field, not a plain or another field's filter", () => {
    expect(isLockFeed(lockChanges('lock'), 'lock')).to.equal(true);
    expect(isLockFeed(lockChanges('lease'), 'lease')).to.equal(true);
    expect(isLockFeed(lockChanges('lease'), 'lock')).to.equal(false);
    expect(isLockFeed([], 'lock')).to.equal(false);
    expect(isLockFeed([{ $match: { operationType: 'update' } }, { $project: { documentKey: 1 } }], 'lock')).to.equal(false);
    expect(isLockFeed(lockChanges('lock').slice(0, 1), 'lock'), 'without the projection of documentKey').to.equal(false);
  });

  it('renders the streams as a table, a refusal as one line naming the reason, and what changed between two reads', () => {
    const row = { cursorId: '8462642181784669700', state: 'getMore' as const, client: '198.51.100.7:53412', appName: 'orders-api', driver: 'nodejs 6.21.0', openedAt: opened, lastUsedAt: used };
    const idle = { ...row, cursorId: '17', state: 'idle' as const, client: null, appName: null, driver: null };
    const base = { namespace: 'shop.orders', field: 'lock', mongos: false };
    const listed: StreamReport = { ...base, streams: [row, idle], others: 1 };
    const lines = renderStreams(listed).split('\n');
    expect(lines[0]).to.equal("change streams: monglock's waiters watch shop.orders (field lock) through 2 cursor(s); 1 other change stream(s) on it, not monglock's on lock:");
    expect(lines[1]).to.match(/^CURSOR ID\s+STATE\s+CLIENT\s+APP\s+DRIVER\s+OPENED\s+LAST USED$/);
    expect(lines[2]).to.match(/^8462642181784669700\s+getMore\s+198\.51\.100\.7:53412\s+orders-api\s+nodejs 6\.21\.0\s+2026-11-27T13:10:00\.000Z\s+2026-11-27T13:20:01\.000Z$/);
    expect(lines[3]).to.match(/^17\s+idle\s+-\s+-\s+-\s/);
    expect(lines[4]).to.match(/^\(an idle cursor names no client/);
    expect(renderStreams({ ...base, mongos: true, streams: [], others: 0 })).to.equal('change streams: no monglock waiter watches shop.orders (field lock) through this mongos (its own clients only; every other mongos has its own)');
    const unauthorized = 'not authorized on admin to execute command { aggregate: 1, pipeline: [ { $currentOp: { allUsers: true, idleCursors: true } } ] } (code 13)';
    expect(renderStreams({ ...base, streams: null, others: null, unavailable: 'inprog', error: unauthorized })).to.equal(`change streams: not listed: $currentOp needs the inprog privilege (role clusterMonitor) to show other users' cursors, the waiting processes' among them: ${unauthorized}`);
    expect(renderStreams({ ...base, streams: null, others: null, unavailable: 'refused', error: "no such command: 'aggregate' (code 59)", openCursors: 3 })).to.equal(
      "change streams: not listed: this server refuses $currentOp: no such command: 'aggregate' (code 59); its serverStatus counts 3 open cursor(s) of every kind, on every collection",
    );
    expect(renderStreams({ ...base, streams: null, others: null, unavailable: 'failed', error: 'connection 3 to 127.0.0.1:27017 closed' })).to.equal('change streams: not listed: $currentOp failed: connection 3 to 127.0.0.1:27017 closed');
    const later: StreamReport = { ...listed, streams: [idle, { ...row, cursorId: '99', client: '198.51.100.8:1200' }] };
    expect(streamChanges(listed, later).map((line) => line.replace(/^\S+ /, ''))).to.deep.equal(['- stream 8462642181784669700 198.51.100.7:53412 orders-api', '+ stream 99 198.51.100.8:1200 orders-api']);
  });

  it('a misspelled --streams is refused before anything is read, naming the option', async function () {
    this.timeout(30_000);
    const misspelled = await run(['status', '--uri', 'mongodb://127.0.0.1:1', '--db', 'd', '--collection', 'c', '--stream']);
    expect(misspelled.code).to.equal(2);
    expect(misspelled.err).to.match(/unknown option '--stream'[\s\S]*--streams/);
  });

  describe('against the test backend', () => {
    let waiter: { child: ChildProcess; collection: Collection<Document>; cursorId?: string } | undefined;
    afterEach(async () => {
      if (!waiter) return;
      const { child, collection, cursorId } = waiter;
      waiter = undefined;
      if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      // A killed client's cursor stays open on mongo-java-server until killed (on mongod, until its idle timeout).
      if (cursorId) await collection.db.command({ killCursors: collection.collectionName, cursors: [Long.fromString(cursorId)] }).catch(() => undefined);
    });

    /** A process that waits on document `id` of `collection` with its change stream open; resolves its stream's cursor id. */
    function waitingProcess(collection: Collection<Document>, id: unknown): Promise<string> {
      const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, id };
      const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'support', 'stream-waiter.ts'), JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
      const started: NonNullable<typeof waiter> = { child, collection };
      waiter = started;
      return new Promise<string>((resolveId, reject) => {
        let output = '';
        child.stdout!.on('data', (chunk: Buffer) => {
          output += chunk.toString();
          const line = output.split('\n').find((text) => text.includes('cursorId'));
          if (line) resolveId((started.cursorId = (JSON.parse(line) as { cursorId: string }).cursorId));
        });
        child.once('exit', (code) => reject(new Error(`the waiting process exited (${code}) before it reported its cursor`)));
      });
    }

    it("status --streams lists a waiting process's stream by its cursor id (mongod) or says in one line why this server cannot (mongo-java-server: $currentOp refused, its open cursors counted); the locks are listed as without it, exit 0", async function () {
      requireCapability(this, 'changeStreams');
      const collection = await freshCollection([{ _id: 'order-1' }]);
      const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
      const held = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'order-1' });
      try {
        const cursorId = await waitingProcess(collection, 'order-1');
        const table = await run(['status', ...where, '--streams']);
        console.log(table.out.replace(/^/gm, '      | '));
        expect(table.code, table.err).to.equal(0);
        const [locks, streams] = table.out.trimEnd().split('\n\n') as [string, string];
        expect(locks.split('\n')[0]).to.match(/^TARGET\s+TAG\s+STATE\s+LOCK ID\s+DOC FENCE\s+SINCE\s+EXPIRES \(server\)\s+LEFT\s+OWNER\s+HOLDS\s+PERMITS \(used\/limit\)$/);
        expect(locks).to.match(new RegExp(`^order-1\\s+write\\s+held\\s+${held.id}\\s+${held.fence}\\s`, 'm'));
        const json = await run(['status', ...where, '--streams', '--json']);
        expect(json.code, json.err).to.equal(0);
        const report = JSON.parse(json.out) as { locks: ListedLock[]; streams: StreamReport };
        expect(report.locks.map((row) => row.lockId)).to.deep.equal([held.id]);
        expect((JSON.parse((await run(['status', ...where, '--json'])).out) as ListedLock[]).map((row) => row.lockId), 'status --json without --streams: the array of locks, as before').to.deep.equal([held.id]);
        if (mongoBackend().server === 'mongo-java-server') {
          expect(streams.split('\n'), 'one line').to.have.length(1);
          const counted = /^change streams: not listed: this server refuses \$currentOp: no such command: 'aggregate' \(code 59\); its serverStatus counts (\d+) open cursor\(s\) of every kind, on every collection$/.exec(streams);
          expect(counted, streams).not.to.equal(null);
          expect(Number(counted![1]), "open cursors, the waiting process's stream among them").to.be.at.least(1);
          expect(report.streams).to.include({ unavailable: 'refused', streams: null, error: "no such command: 'aggregate' (code 59)" });
          console.log(`      mongo-java-server refused $currentOp; the waiting process's stream is cursor ${cursorId}, among the ${counted![1]} open cursors its serverStatus counts`);
        } else {
          expect(streams).to.match(new RegExp(`^${cursorId}\\s+(getMore|idle)\\s`, 'm'));
          expect(report.streams.streams?.map((row) => row.cursorId)).to.include(cursorId);
        }
      } finally {
        await held.release();
      }
    });

    it("watch --streams prints the report under its first listing, then a waiting process's stream as it comes (mongod), or the refusal once (mongo-java-server), and goes on showing lock changes", async function () {
      requireCapability(this, 'changeStreams');
      const collection = await freshCollection([{ _id: 'w' }]);
      const held = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'w' });
      const watching = watchCli(['--streams', '--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName, '--interval', '100']);
      let code: number | null | undefined;
      try {
        await watching.until(/^change streams: /);
        const report = watching.lines.findIndex((line) => line.startsWith('change streams: '));
        expect(watching.lines.slice(report - 1, report + 1).join('\n')).to.match(new RegExp(`^w\\s+write\\s+held\\s+${held.id}\\s.*\nchange streams: (not listed: this server refuses \\$currentOp: .+|no monglock waiter watches \\S+ \\(field lock\\).*)$`));
        const cursorId = await waitingProcess(collection, 'w');
        if (mongoBackend().server !== 'mongo-java-server') await watching.until(new RegExp(` \\+ stream ${cursorId} `));
        await held.release();
        await watching.until(new RegExp(` - w write held ${held.id} doc fence 1$`));
        expect(watching.lines.filter((line) => / change streams: /.test(line)), 'no report line after the first').to.deep.equal([]);
      } finally {
        code = await watching.stop(); // also when an expectation failed
      }
      expect(code).to.equal(0);
    });
  });
});
