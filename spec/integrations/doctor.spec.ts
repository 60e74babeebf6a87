/**
 * `doctor()`: what it finds on the test backend as it really is, and on a sharded cluster
 * simulated on it (stress/simulated-cluster.ts: routers whose `$$NOW` is the server's clock plus
 * an offset, `hello` answering `isdbgrid`, `config.collections` holding the shard key).
 */
import { expect } from 'chai';
import { MongoClient, type ChangeStream, type Collection, type Document, type Long } from 'mongodb';
import { doctor, type DoctorCheck, type DoctorFinding, type DoctorReport } from '../../lib';
import { suggestedIndex } from '../../lib/integrations/cli/lock-listing';
import { SCRATCH_COLLECTION } from '../../lib/integrations/cli/doctor-clocks';
import { reachMongos, uriForHost } from '../../lib/integrations/cli/doctor-command';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { CommandProxy } from '../support/command-proxy';
import { failureOf, freshCollection, mongoBackend, newClient, sleep, snapshotOf, testDb } from '../support/fixture';
import { watchedCollection } from '../support/watched-collection';

/** The one finding of `report` named `name`. */
function findingOf(report: DoctorReport, name: DoctorCheck): DoctorFinding {
  const found = report.findings.filter((item) => item.name === name);
  expect(found, `findings named ${name}`).to.have.length(1);
  return found[0]!;
}

/** A collection with two documents, and the same collection as a client of a simulated cluster sees it. */
async function clusterCollection(offsetMs: number, shardKey: Document = { _id: 1 }): Promise<{ real: Collection<Document>; routed: Collection<Document> }> {
  const real = await freshCollection([{ _id: 'order-1', region: 'eu' }, { _id: 'order-2', region: 'us' }]);
  return { real, routed: simulatedCluster(real, { routers: [{ offsetMs }], shardKey }) };
}

const scratchLeft = async (): Promise<boolean> => (await testDb().listCollections({}, { nameOnly: true }).toArray()).some((info) => info.name === SCRATCH_COLLECTION);

describe('doctor()', function () {
  this.timeout(60_000);

  it('on the test backend: its topology and engine, one clock within the round trip, change streams as it has them, and the suggested partial index once created', async () => {
    const backend = mongoBackend();
    const collection = await freshCollection([{ _id: 'order-1' }, { _id: 'order-2', lock: { until: new Date(0) } }]);
    const before = await snapshotOf(collection);
    const report = await doctor(collection);
    for (const item of report.findings) console.log(`      | ${item.status.padEnd(4)} ${item.name}: ${item.summary}`);

    expect(report.namespace).to.equal(`${collection.dbName}.${collection.collectionName}`);
    expect(report.ok, 'no failing finding').to.equal(true);
    const topology = findingOf(report, 'topology');
    expect(topology.values.kind).to.equal(backend.server === 'mongos' ? 'sharded cluster' : backend.capabilities.replicaSet ? 'replica set' : 'standalone');
    const server = findingOf(report, 'server');
    expect(server.values.engine).to.equal(backend.server === 'ferretdb' ? 'FerretDB' : backend.server);
    expect(server.status).to.equal(backend.server === 'mongod' || backend.server === 'mongos' ? 'ok' : 'warn');

    // One server, one clock: the interval on $$NOW − $currentDate holds 0, and is as wide as two round trips.
    const skew = findingOf(report, 'clock-skew');
    expect(skew.status).to.equal('ok');
    expect(skew.values.maxClockSkew).to.equal(0);
    expect(skew.values.lowMs as number).to.be.at.most(0);
    expect(skew.values.highMs as number).to.be.at.least(0);
    expect((skew.values.highMs as number) - (skew.values.lowMs as number)).to.be.below(1_000);

    const majority = findingOf(report, 'majority-writes');
    expect(majority.status, majority.summary).to.equal('ok');
    expect(majority.values).to.include({ writes: 5 });
    expect(majority.values.maxMs as number).to.be.at.least(majority.values.medianMs as number);

    // mongo-java-server with its oplog (as the launcher starts it) and a replica set deliver the scratch write.
    const changes = findingOf(report, 'change-streams');
    expect(changes.status, changes.summary).to.equal(backend.capabilities.changeStreams ? 'ok' : 'warn'); // never failing: without streams, monglock's waiters poll
    expect(changes.values.works, changes.summary).to.equal(backend.capabilities.changeStreams);
    if (backend.server === 'mongo-java-server') expect(changes.summary).to.match(/^yes: monglock's change stream on \S+ opened, and a watcher of monglock_doctor got an update after /);

    expect(findingOf(report, 'shard-key')).to.include({ status: 'ok' });
    const wc = findingOf(report, 'write-concern');
    if (backend.server === 'mongo-java-server') expect(wc).to.include({ status: 'warn' }).and.to.have.property('summary').that.matches(/getDefaultRWConcern refused: no such command/);

    const index = findingOf(report, 'index');
    expect(index.status).to.equal('warn');
    expect(index.advice).to.include(`createIndex({ 'lock.until': 1 }, { partialFilterExpression: { 'lock.until': { $exists: true } } })`);

    // Nothing written to the caller's documents; the scratch collection is gone.
    expect(await snapshotOf(collection)).to.equal(before);
    expect(await scratchLeft()).to.equal(false);

    const { key, options } = suggestedIndex('lock');
    await collection.createIndex(key, options);
    const indexed = findingOf(await doctor(collection), 'index');
    expect(indexed.status, indexed.summary).to.equal('ok');
    await collection.dropIndexes();
    await collection.createIndex({ 'lock.until': 1 });
    const full = findingOf(await doctor(collection), 'index');
    expect(full.status).to.equal('warn');
    expect(full.summary).to.match(/lock\.until_1 on lock\.until indexes every document/);
  });

  it('a simulated mongos 1.5 s ahead of the shard, with the default 1 s skew assumed: a failing finding that names the measured skew and suggests a maxClockSkew', async () => {
    const { routed } = await clusterCollection(1_500);
    const report = await doctor(routed);
    const skew = findingOf(report, 'clock-skew');
    console.log(`      | ${skew.status} ${skew.summary}\n      | → ${skew.advice}`);
    const topology = findingOf(report, 'topology');
    expect(topology.values).to.include({ kind: 'sharded cluster' });
    expect(topology.summary).to.match(/^sharded cluster, through the client's seed list \(127\.0\.0\.1:\d+\)$/);
    expect(report.ok).to.equal(false);
    expect(skew.status).to.equal('fail');
    expect(skew.values.maxClockSkew).to.equal(1_000);
    // The measured interval holds the router's 1.5 s offset (its midpoint depends on how even the round trips were).
    expect(skew.values.lowMs as number).to.be.at.most(1_505);
    expect(skew.values.highMs as number).to.be.at.least(1_495);
    expect(skew.summary).to.include(`+${(skew.values.skewMs as number).toFixed(1)} ms`);
    expect(skew.summary).to.match(/beyond the 1000 ms maxClockSkew the locks assume/);
    expect(skew.values.suggestedMaxClockSkew as number).to.be.above(1_550);
    expect(skew.advice).to.include(`maxClockSkew: ${String(skew.values.suggestedMaxClockSkew)}`);
    expect(skew.values.readOn).to.equal(routed.collectionName); // $$NOW read through the router, on the caller's collection
    expect(await scratchLeft()).to.equal(false);

    // The same cluster with the suggested skew assumed passes.
    const assumed = findingOf(await doctor(routed, { maxClockSkew: skew.values.suggestedMaxClockSkew as number }), 'clock-skew');
    expect(assumed.status, assumed.summary).to.equal('ok');
  });

  it('a simulated mongos 50 ms ahead, with the default 1 s skew assumed: passes, and the measured interval holds the 50 ms', async () => {
    const { routed } = await clusterCollection(50);
    const report = await doctor(routed);
    const skew = findingOf(report, 'clock-skew');
    console.log(`      | ${skew.status} ${skew.summary}`);
    expect(skew.status).to.equal('ok');
    expect(report.findings.filter((item) => item.status === 'fail')).to.deep.equal([]);
    expect(report.ok).to.equal(true);
    // The router's clock is the test process's monotonic clock plus 50 ms; the server's, the JVM's wall clock: a few ms apart at most.
    expect(skew.values.lowMs as number).to.be.at.most(55);
    expect(skew.values.highMs as number).to.be.at.least(45);
    expect(skew.summary).to.match(/within the 1000 ms maxClockSkew the locks assume/);
  });

  it('a filter without an equality on every shard key field fails the shard-key finding; one that names the whole key passes', async () => {
    const { routed } = await clusterCollection(0, { region: 1, _id: 1 });
    const partial = findingOf(await doctor(routed, { filter: { _id: 'order-1' } }), 'shard-key');
    console.log(`      | ${partial.status} ${partial.summary}\n      | → ${partial.advice}`);
    expect(partial.status).to.equal('fail');
    expect(partial.values.missing).to.deep.equal(['region']);
    expect(partial.values.shardKey).to.deep.equal({ region: 1, _id: 1 });
    expect(partial.advice).to.match(/add an equality on region/);
    const ranged = findingOf(await doctor(routed, { filter: { _id: 'order-1', region: { $in: ['eu'] } } }), 'shard-key');
    expect(ranged.status).to.equal('fail');
    const whole = await doctor(routed, { filter: { _id: 'order-1', region: 'eu' } });
    expect(findingOf(whole, 'shard-key').status).to.equal('ok');
    expect(findingOf(await doctor(routed, { filter: { $and: [{ region: { $eq: 'eu' } }, { _id: 'order-1' }] } }), 'shard-key').status).to.equal('ok');
    expect(whole.ok, JSON.stringify(whole.findings.filter((item) => item.status === 'fail'))).to.equal(true);
  });

  it('bad options are refused before anything is sent', async () => {
    const collection = await freshCollection();
    expect(await failureOf(() => doctor(collection, { field: 'lock.until' }))).to.be.instanceOf(TypeError);
    expect(await failureOf(() => doctor(collection, { maxClockSkew: -1 }))).to.be.instanceOf(RangeError);
    expect(await failureOf(() => doctor(collection, { filter: { $where: 'true' } }))).to.be.instanceOf(TypeError);
    expect(await failureOf(() => doctor({} as never))).to.be.instanceOf(TypeError);
    expect((await failureOf(() => doctor(collection, { maxClockSkw: 5 } as never))).message).to.match(/Unknown key `options.maxClockSkw`. Did you mean `maxClockSkew`\?/);
    expect(await scratchLeft()).to.equal(false);
  });

  it('monglock doctor reaches each host of the seed list on its own: a server that is not a mongos, or does not answer, is no route to measure through', async () => {
    expect(uriForHost('mongodb://app:s%40cret@m1:27017,m2:27018/shop?authSource=admin&tls=true', 'm2:27018')).to.equal('mongodb://app:s%40cret@m2:27018/shop?authSource=admin&tls=true');
    expect(uriForHost('mongodb://m1,m2', 'm2:27017')).to.equal('mongodb://m2:27017');
    expect(uriForHost('mongodb://m1:1,m2:2/?w=majority', 'm1:1')).to.equal('mongodb://m1:1/?w=majority');

    const collection = await freshCollection();
    const host = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:')).host;
    const target = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, field: 'lock' };
    const found = await reachMongos(target, [host, '127.0.0.1:1']);
    await Promise.all(found.clients.map((client) => client.close()));
    console.log(found.reach.map((each) => `      | ${each.via}: ${each.error ?? 'a mongos'}`).join('\n'));
    expect(found.routes).to.deep.equal([]);
    expect(found.reach.map((each) => each.via)).to.deep.equal([host, '127.0.0.1:1']);
    expect(found.reach[0]?.error).to.equal(mongoBackend().server === 'mongos' ? undefined : 'answers, but is not a mongos');
    expect(found.reach[1]?.error).to.match(/ECONNREFUSED|Server selection timed out/);
    const srv = await reachMongos({ ...target, uri: 'mongodb+srv://cluster0.example.net' }, ['m1:27017']);
    expect(srv).to.deep.equal({ reach: [{ via: 'm1:27017' }], routes: [], clients: [] }); // mongodb+srv://: measured through the client's own choice
  });
});

describe('doctor() on clients users configure', function () {
  this.timeout(60_000);

  for (const timeoutMS of [0, 150]) {
    it(`on a client with timeoutMS ${timeoutMS} (client-side operation timeout): reports whether change streams work as a finding, as it does without, instead of throwing`, async () => {
      const collection = await freshCollection([{ _id: 'order-1' }]);
      const client = await newClient({ timeoutMS });
      try {
        const outcome = await doctor(client.db(collection.dbName).collection(collection.collectionName)).then(
          (report) => `${findingOf(report, 'change-streams').status}: ${findingOf(report, 'change-streams').summary}`,
          (error: Error) => `threw ${error.name}: ${error.message}`,
        );
        console.log(`      ${outcome}`);
        expect(outcome).to.match(/^(ok|warn): /);
        expect(await scratchLeft(), 'the scratch collection is gone').to.equal(false);
      } finally {
        await client.close();
      }
    });
  }

  it('leaves no change-stream cursor open on the server when its stream\'s opening aggregate answers after the check gave up (a reply slower than its timeout)', async function () {
    const match = /^mongodb:\/\/([^:/,@]+):(\d+)\/?(?:\?.*)?$/.exec(mongoBackend().uri);
    if (!match || !mongoBackend().capabilities.changeStreams) {
      console.log(`      skipped: the test proxies a single-host URI of a server with change streams, not ${mongoBackend().uri}`);
      return this.skip();
    }
    const collection = await freshCollection([{ _id: 'order-1' }]);
    const proxy = new CommandProxy({ host: match[1]!, port: Number(match[2]) });
    await proxy.start();
    const client = await new MongoClient(proxy.uri).connect();
    try {
      const streams: ChangeStream[] = [];
      const watched = watchedCollection(client, collection, (stream) => (streams.push(stream), stream));
      // The aggregates that open change streams answer 2 s late (a slow network or server); the doctor waits 500 ms per command.
      proxy.slowReplies = { match: (command) => command.aggregate !== undefined && Array.isArray(command.pipeline) && '$changeStream' in (command.pipeline[0] as Document), ms: 2_000 };
      const report = await doctor(watched, { timeout: 500 });
      const changes = findingOf(report, 'change-streams');
      console.log(`      ${changes.status}: ${changes.summary}`);
      expect(changes.status, 'no change stream within the timeout: a warning').to.equal('warn');
      await sleep(2_500); // the held-back replies have come: each opened a cursor on the server
      const ids = streams.map((stream) => (stream as unknown as { cursor?: { id?: Long | null } }).cursor?.id).filter((id): id is Long => !!id && !id.isZero());
      const reply = await testDb().command({ killCursors: collection.collectionName, cursors: ids });
      const killed = ((reply.cursorsKilled as unknown[] | undefined) ?? []).map(String);
      console.log(`      ${streams.length} stream(s) opened by the doctor, cursors ${ids.map(String).join(', ') || 'none'} on the server; still open (killCursors found them): ${killed.join(', ') || 'none'}`);
      expect(killed, "the doctor's stream cursors still open on the server").to.deep.equal([]);
    } finally {
      await client.close();
      await proxy.stop();
    }
  });
});
