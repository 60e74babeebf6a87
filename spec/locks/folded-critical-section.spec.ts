import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { CommandStartedEvent, Document } from 'mongodb';
import { commit, commitAll, multiLock, writeLock } from '../../lib';
import { lockOf } from '../../lib/hapi';
import { delayedCollection } from '../../stress/delayed-collection';
import { commandsSentBy, freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { makeServer, stopServers } from '../support/hapi-server';
import { secondCopyOfCommit } from '../support/second-copy';

describe('the critical section folded into the lock\'s own writes', () => {
  afterEach(stopServers);

  it('acquire({ document }) returns the locked document (without the lock field), whole or projected', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100, owner: 'ann', notes: 'x' }]);
    const accounts = writeLock({ collection });
    const whole = await accounts.acquire({ _id: 1 }, { document: true });
    expect(whole.document).to.deep.equal({ _id: 1, balance: 100, owner: 'ann', notes: 'x' });
    await whole.release();
    const included = await accounts.acquire({ _id: 1 }, { document: { balance: 1 } });
    expect(included.document).to.deep.equal({ _id: 1, balance: 100 });
    await included.release();
    const excluded = await accounts.acquire({ _id: 1 }, { document: { notes: 0 } });
    expect(excluded.document).to.deep.equal({ _id: 1, balance: 100, owner: 'ann' });
    await excluded.release();
    const plain = await accounts.acquire({ _id: 1 });
    expect(plain.document).to.equal(undefined);
    await plain.release();
  });

  it('release({ update }) applies the update and releases in one write, only while the lock is held', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 150 });
    const held = await accounts.acquire({ _id: 1 }, { document: true });
    await held.release({ update: { $inc: { balance: -30 }, $set: { last: 'debit' } } });
    const after = await collection.findOne({ _id: 1 as never });
    expect(after).to.deep.include({ balance: 70, last: 'debit' });
    expect(after?.lock.tags.write).to.deep.equal([]);

    // A lock that expired (and was taken over) applies nothing.
    const stale = await accounts.acquire({ _id: 1 });
    await sleep(200);
    const next = await accounts.acquire({ _id: 1 });
    const refused = await rejectionOf(stale.release({ update: { $inc: { balance: -1_000 } } }));
    expect(refused.subtype).to.equal('LockWasReacquired');
    expect(refused.message).to.match(/update was not applied/);
    expect((await collection.findOne({ _id: 1 as never }))?.balance).to.equal(70);
    // An expired lock nobody took over applies nothing either.
    await next.release();
    const expired = await accounts.acquire({ _id: 1 });
    await sleep(200);
    expect((await rejectionOf(accounts.release({ _id: 1 }, { lock: expired, update: { $inc: { balance: -1_000 } } }))).subtype).to.equal('LockNotFound');
    expect((await collection.findOne({ _id: 1 as never }))?.balance).to.equal(70);
  });

  it('extend({ update }) writes with the extension, only while the lock is held', async () => {
    const collection = await freshCollection([{ _id: 1, step: 0 }]);
    const jobs = multiLock({ collection, locktimeouts: { run: 5_000 } });
    const held = await jobs.acquire({ _id: 1 }, { tag: 'run' });
    await jobs.extend({ _id: 1 }, { lock: held, update: { $set: { step: 1 } } });
    await held.extend(5_000, { update: { $set: { step: 2 } } });
    expect((await collection.findOne({ _id: 1 as never }))?.step).to.equal(2);
    await held.release();
  });

  it('bad updates are refused before anything is written', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const held = await lock.acquire({ _id: 1 });
    const bad: Array<[unknown, RegExp]> = [
      [{ balance: 1 }, /update operators/],
      [[{ $set: { a: 1 } }], /to be an object/],
      [{ $set: { lock: null } }, /not to change `lock`/],
      [{ $unset: { 'lock.tags': '' } }, /not to change `lock.tags`/],
      [{ $set: { _id: 2 } }, /not to change `_id`/],
      [{ $rename: { a: 'lock' } }, /not to change `lock`/],
      [{}, /at least one update operator/],
    ];
    for (const [update, message] of bad) {
      const error = await rejectionOf(held.release({ update } as never));
      expect(error, JSON.stringify(update)).to.be.instanceOf(TypeError);
      expect(error.message).to.match(message);
    }
    expect((await rejectionOf(lock.release({ _id: 1 }, { update: { $set: { a: 1 } } }))).message).to.match(/forced release applies no update/);
    expect((await rejectionOf(lock.acquire({ _id: 1 }, { document: { lock: 0 } }))).message).to.match(/not to exclude `lock`/);
    const stored = await collection.findOne({ _id: 1 as never });
    expect(stored?.a).to.equal(undefined);
    expect(stored?.lock.tags.write.map((entry: { id: string }) => entry.id)).to.deep.equal([held.id]);
  });

  it('using() with commit(): a read-modify-write is two commands, the release at majority, a plain release at w: 1', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const client = await newClient({ monitorCommands: true });
    const sent: CommandStartedEvent[] = [];
    client.on('commandStarted', (event) => sent.push(event));
    const accounts = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName) });
    const value = await accounts.using({ _id: 1 }, { document: true }, (lock) => {
      const balance = (lock.document?.balance as number) - 25;
      return commit({ $set: { balance } }, balance);
    });
    expect(value).to.equal(75);
    expect((await collection.findOne({ _id: 1 as never }))?.balance).to.equal(75);
    const lockCommands = sent.filter((event) => ['findAndModify', 'update', 'aggregate', 'find'].includes(event.commandName));
    expect(lockCommands.map((event) => event.commandName)).to.deep.equal(['findAndModify', 'update']);
    expect((lockCommands[0]!.command.writeConcern as Document).w).to.equal('majority');
    expect((lockCommands[1]!.command.writeConcern as Document).w, 'a release that carries data').to.equal('majority');

    sent.length = 0;
    await (await accounts.acquire({ _id: 1 })).release();
    const plain = sent.filter((event) => event.commandName === 'update');
    expect((plain[0]!.command.writeConcern as Document).w, 'a plain release').to.equal(1);
  });

  it('a commit whose lease was lost (the body outlived it, its extensions delayed) applies nothing, and using() says so', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    let bodyStarted = false;
    // Once the body runs, extensions reach the server 1.5 s late: the 600 ms lease runs out.
    const slow = delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' && bodyStarted ? 1_500 : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 600 });
    const other = writeLock({ collection, locktimeout: 5_000 });
    let aborted = false;
    const outcome = accounts
      .using({ _id: 1 }, { document: true }, async (_lock, signal) => {
        bodyStarted = true;
        await sleep(900);
        aborted = signal.aborted;
        return commit({ $inc: { balance: -50 } });
      })
      .then(() => 'committed', (error: Error & { subtype?: string }) => error.subtype);
    await sleep(700);
    const thief = await other.acquire({ _id: 1 }, { wait: 3_000 });
    expect(await outcome).to.be.oneOf(['LockWasReacquired', 'LockNotFound']);
    expect(aborted, 'the body was told').to.equal(true);
    expect((await collection.findOne({ _id: 1 as never }))?.balance, 'not applied').to.equal(100);
    await thief.release();
  });

  it('using() whose body returns commitAll([…]) (a group\'s) is refused, as usingAll() refuses commit(): TypeError, nothing written, the lock released', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 60_000 });
    const outcome = await accounts.using({ _id: 1 }, {}, () => commitAll([{ $inc: { balance: -50 } }], 'paid')).then(
      (value) => `resolved ${String(value)}`,
      (error: Error) => `${error.name}: ${error.message}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    expect(outcome, 'the call says what the body should have returned').to.match(/^TypeError: .*commit\(update, value\)/);
    expect({ balance: doc?.balance, held: doc?.lock?.tags?.write?.length }, 'nothing written, the lock released').to.deep.equal({ balance: 100, held: 0 });
  });

  it('using() whose body returns a bare update document ({ $set: … }) instead of commit() is refused: TypeError, nothing written, the lock released', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 60_000 });
    const outcome = await accounts.using({ _id: 1 }, {}, () => ({ $set: { balance: 50 } })).then(
      (value) => `resolved ${JSON.stringify(value)}`,
      (error: Error) => `${error.name}: ${error.message}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    expect(outcome, 'the call says that commit() was forgotten').to.match(/^TypeError: .*return `commit\(update, value\)`.*nothing was written, and the lock was released/);
    expect({ balance: doc?.balance, held: doc?.lock?.tags?.write?.length }, 'nothing written, the lock released').to.deep.equal({ balance: 100, held: 0 });
    const plain = await accounts.using({ _id: 1 }, {}, () => ({ status: 'ok', $note: 'a value with a plain key is a value' }));
    expect(plain, 'a returned object with a plain key is the value').to.deep.equal({ status: 'ok', $note: 'a value with a plain key is a value' });
    const filter = await accounts.using({ _id: 1 }, {}, () => ({ $or: [{ status: 'open' }, { status: 'held' }] }));
    expect(filter, 'a returned filter (operators that are not update operators) is the value').to.deep.equal({ $or: [{ status: 'open' }, { status: 'held' }] });
  });

  it('using() whose body returns a commit() of another copy of monglock is refused: TypeError, nothing written, the lock released', async () => {
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 60_000 });
    const OtherCopy = secondCopyOfCommit();
    const outcome = await accounts.using({ _id: 1 }, {}, () => new OtherCopy<string, Document>({ $set: { balance: 50 } }, 'paid')).then(
      (value) => `resolved ${JSON.stringify(value)}`,
      (error: Error) => `${error.name}: ${error.message}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    expect(outcome, 'the call names the second copy').to.match(/^TypeError: .*another copy of monglock.*nothing was written, and the lock was released/);
    expect({ balance: doc?.balance, held: doc?.lock?.tags?.write?.length }, 'nothing written, the lock released').to.deep.equal({ balance: 100, held: 0 });
  });

  it('hapi: the handler gets the document and returns commit(update, value): applied before the answer, in two commands', async () => {
    const collection = await freshCollection([{ _id: 'acc', balance: 10 }]);
    const accounts = writeLock({ collection, locktimeout: 5_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/deposit',
        options: {
          plugins: { monglock: { lock: accounts, filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: true, wait: 2_000 } },
          handler: async (request) => {
            const balance = (lockOf(request).document?.balance as number) + 5;
            return commit({ $set: { balance } }, { balance });
          },
        },
      }),
    );
    const one = await commandsSentBy(() => server.inject({ method: 'POST', url: '/accounts/acc/deposit' }));
    expect(one.commands).to.deep.equal(['findAndModify', 'update']);
    const answers = await Promise.all(Array.from({ length: 10 }, () => server.inject({ method: 'POST', url: '/accounts/acc/deposit' })));
    expect(answers.map((answer) => answer.statusCode)).to.deep.equal(new Array(10).fill(200));
    expect(answers.map((answer) => (answer.result as { balance: number }).balance).sort((a, b) => a - b)).to.deep.equal([20, 25, 30, 35, 40, 45, 50, 55, 60, 65]);
    const stored = await collection.findOne({ _id: 'acc' as never });
    expect(stored?.balance, 'no lost update').to.equal(65);
    await sleep(50);
    expect(stored?.lock.tags.write.filter((entry: { exp: Date }) => entry.exp.getTime() > Date.now())).to.deep.equal([]);
  });
});

/*
 * Every lock write that carries the caller's data is sent at majority at least (README, "Write
 * concerns": "A release that carries an update (commit): at least majority, since it carries your
 * data"; the folded section at `w: 1` is safe "only when every effect of the section goes through
 * the commit (or through guard()ed writes at majority)"). The defect guarded against:
 * `extend({ update })` carries data too, but was sent at the call's `w` (1 for a lock configured
 * with `w: 1`, as the folded pattern invites), never raised to majority.
 */
describe('the write concern of data-carrying lock writes', () => {
  it('extend({ update }) of a lock configured with w: 1 is sent at majority, like a commit', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, step: 0 }]);
    const client = await newClient({ monitorCommands: true });
    const sent: CommandStartedEvent[] = [];
    client.on('commandStarted', (event) => sent.push(event));
    const jobs = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), w: 1 });
    const held = await jobs.acquire({ _id: 1 }, { document: true });
    sent.length = 0;
    await held.extend(10_000, { update: { $set: { step: 1 } } });
    await held.release({ update: { $set: { step: 2 } } });
    const concerns = sent
      .filter((event) => ['findAndModify', 'update'].includes(event.commandName))
      .map((event) => `${event.commandName} w:${String((event.command.writeConcern as Document | undefined)?.w)}`);
    expect(concerns).to.deep.equal(['findAndModify w:majority', 'update w:majority']);
  });
});

/*
 * `document` with an assertive tag: when the first attempt registers (the tags it asserts over
 * are held) and the wait goes on with continuations, the lock that finally resolves carries the
 * document as it is once the lock is effective. The defect guarded against: the continuations never
 * asked for it and the registration's document (read while the other holder still held the lock,
 * so stale) was dropped, so a folded section on an assertive tag (the writer of a read/write lock,
 * README "Relationships") got `handle.document === undefined` whenever it had to wait for readers.
 */
describe('document with an assertive tag that had to wait', () => {
  it('the handle that resolves carries the document as it is once the lock is effective', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 5_000, write: 5_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
    const writer = rw.acquire({ _id: 1 }, { tag: 'write', wait: 3_000, document: { balance: 1 } });
    await sleep(300);
    await collection.updateOne({ _id: 1 as never }, { $set: { balance: 90 } }); // a change made before the writer's lock is effective
    await reader.release();
    const handle = await writer;
    const document = handle.document;
    await handle.release();
    expect(document).to.deep.equal({ _id: 1, balance: 90 });
  });
});
