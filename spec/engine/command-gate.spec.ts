/**
 * A client's lock commands wait in its own queue, not in the driver's connection pool: at most
 * the cap is in flight, releases and extensions leave before attempts, time queued counts within
 * `timeout` (a command past its deadline is never sent), and a stamp is taken as its command leaves.
 */
import { expect } from 'chai';
import type { Collection, CommandStartedEvent, Document, MongoClient } from 'mongodb';
import { multiLock, resourceLocks, writeLock, type LockHandle } from '../../lib';
import { capFor, commandGateOf } from '../../lib/engine/command-gate';
import { delayedCollection } from '../../stress/delayed-collection';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { gate } from '../support/lock-commands';

/** Lock commands (not a change stream's) a client sent on `name`, in the order they started; `inFlight` at most at once. */
function watchLockCommands(client: MongoClient, name: string): { started: CommandStartedEvent[]; maxInFlight: () => number } {
  const started: CommandStartedEvent[] = [];
  const open = new Set<number>();
  let max = 0;
  const ours = (event: CommandStartedEvent): boolean => event.command[event.commandName] === name && !JSON.stringify(event.command).includes('$changeStream');
  client.on('commandStarted', (event) => {
    if (!ours(event)) return;
    started.push(event);
    open.add(event.requestId);
    max = Math.max(max, open.size);
  });
  const done = ({ requestId }: { requestId: number }): void => void open.delete(requestId);
  client.on('commandSucceeded', done);
  client.on('commandFailed', done);
  return { started, maxInFlight: () => max };
}

/** The commands among `started` that name the document `_id: id`. */
const naming = (started: readonly CommandStartedEvent[], id: string): string[] => started.filter((event) => JSON.stringify(event.command).includes(`"${id}"`)).map((event) => event.commandName);

/** A client whose gate lets one lock command through at a time (`maxPoolSize` 5), and its lock collection. */
async function oneAtATime(docs: Document[]): Promise<{ client: MongoClient; collection: Collection<Document> }> {
  const client = await newClient({ maxPoolSize: 5, monitorCommands: true });
  const shared = await freshCollection(docs);
  const collection = client.db(shared.dbName).collection(shared.collectionName);
  expect(commandGateOf(collection).cap).to.equal(1);
  return { client, collection };
}

/**
 * The same collection, with the request of the acquisition of `{ _id: 'blocker' }` held until
 * `held` resolves: it holds its slot meanwhile. `holding` resolves once it does.
 */
function withBlocker(collection: Collection<Document>, held: Promise<void>): { slow: Collection<Document>; holding: Promise<void> } {
  let holds!: () => void;
  const holding = new Promise<void>((resolve) => (holds = resolve));
  const slow = delayedCollection(collection, {
    request: (method, _n, args) => {
      if (method !== 'findOneAndUpdate' || !JSON.stringify(args[0]).includes('"blocker"')) return 0;
      holds();
      return held;
    },
  });
  return { slow, holding };
}

/**
 * A client with one lock command slot ({@link oneAtATime}) over `docs` and `{ _id: 'blocker' }`,
 * `{ _id: 'warm' }`, its lock commands watched; `locks` (calls of `timeout` ms) and a blocking lock,
 * both knowing the deployment (so the blocker's first command is its acquisition). `block()` starts
 * the blocker's acquisition and resolves (with it) once it holds the slot, until `held` opens.
 */
async function oneSlotBlocked(docs: Document[], timeout: number) {
  const { client, collection } = await oneAtATime([{ _id: 'blocker' }, ...docs, { _id: 'warm' }]);
  const watched = watchLockCommands(client, collection.collectionName);
  const held = gate();
  const { slow, holding } = withBlocker(collection, held.promise);
  const blocking = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
  const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout, changeStreams: false });
  await (await blocking.acquire({ _id: 'warm' })).release();
  // The blocker's acquisition is returned in an object: an async function would wait for it.
  const block = async (): Promise<{ blocker: Promise<LockHandle> }> => {
    const blocker = blocking.acquire({ _id: 'blocker' });
    await holding;
    return { blocker };
  };
  return { collection, watched, held, locks, block };
}

/** Resolves once `collection`'s gate has `waiting` commands queued. */
async function untilQueued(collection: Collection<Document>, waiting: number): Promise<void> {
  const commandGate = commandGateOf(collection);
  for (let i = 0; i < 1_000 && commandGate.waiting < waiting; i++) await sleep(5);
  expect(commandGate.waiting).to.equal(waiting);
}

describe('the queue of a client\'s lock commands', () => {
  it('caps a pool of n at max(1, min(n - 4, 3n/4)) lock commands, 75 for the default 100 and for an unlimited pool', () => {
    expect([1, 4, 5, 8, 10, 100, 0].map(capFor)).to.deep.equal([1, 1, 1, 4, 6, 75, 75]);
  });

  it('with maxPoolSize 10, 300 using() bodies with a 2 s lease: never more than 6 lock commands in flight, and no acquisition\'s stamp is refused as late', async function () {
    this.timeout(120_000);
    const client = await newClient({ maxPoolSize: 10, monitorCommands: true });
    const ids = Array.from({ length: 300 }, (_, i) => `job${i}`);
    const shared = await freshCollection(ids.map((_id) => ({ _id })));
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    const watched = watchLockCommands(client, collection.collectionName);
    const jobs = writeLock({ collection, locktimeout: 2_000, changeStreams: false });
    const outcomes = await Promise.all(
      ids.map((_id) =>
        jobs.using({ _id }, {}, async () => {
          await sleep(1_000);
          return 'held';
        }).catch((error: Error & { subtype?: string }) => `${error.subtype ?? error.name}: ${error.message}`),
      ),
    );
    const tally = outcomes.reduce<Record<string, number>>((counts, outcome) => ({ ...counts, [outcome.replace(/\d+/g, '#')]: (counts[outcome.replace(/\d+/g, '#')] ?? 0) + 1 }), {});
    console.log(`      ${JSON.stringify(tally)}; at most ${watched.maxInFlight()} lock commands in flight`);
    // On a loaded machine a lease can be lost, or a call time out in the queue; a stamp is never refused for the time it waited there.
    expect(outcomes.filter((outcome) => /time stamp|too late/.test(outcome))).to.deep.equal([]);
    expect(watched.maxInFlight()).to.be.within(1, 6);
  });

  it('sends a release, then an extension, before the attempts queued ahead of them', async function () {
    this.timeout(30_000);
    const { client, collection } = await oneAtATime(['blocker', 'rel', 'ext', 'a1', 'a2', 'a3'].map((_id) => ({ _id })));
    const watched = watchLockCommands(client, collection.collectionName);
    const held = gate();
    const { slow, holding } = withBlocker(collection, held.promise);
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
    const releasing = await locks.acquire({ _id: 'rel' });
    const extending = await locks.acquire({ _id: 'ext' });
    const blocker = locks.acquire({ _id: 'blocker' });
    await holding;
    const attempts = ['a1', 'a2', 'a3'].map((_id) => locks.acquire({ _id }));
    await untilQueued(collection, 3);
    const released = releasing.release();
    const extended = extending.extend(10_000);
    await untilQueued(collection, 5);
    const from = watched.started.length;
    held.open();
    await Promise.all([blocker, released, extended, ...attempts]);
    const order = watched.started.slice(from).map((event) => ['rel', 'ext', 'a1', 'a2', 'a3', 'blocker'].find((id) => JSON.stringify(event.command).includes(`"${id}"`)));
    expect(order).to.deep.equal(['blocker', 'rel', 'ext', 'a1', 'a2', 'a3']);
  });

  it('never sends a command whose deadline passed while it was queued: an acquisition fails with its timeout, a commit with applied: false', async function () {
    this.timeout(30_000);
    const { collection, watched, held, locks, block } = await oneSlotBlocked([{ _id: 'late' }, { _id: 'acc', balance: 100 }], 1_000);
    const account = await locks.acquire({ _id: 'acc' });
    const { blocker } = await block();
    const acquisition = rejectionOf(locks.acquire({ _id: 'late' }));
    const committing = rejectionOf(account.release({ update: { $inc: { balance: -30 } } }));
    await untilQueued(collection, 2);
    const [acquireError, commitError] = await Promise.all([acquisition, committing]);
    held.open();
    await (await blocker).release();
    await sleep(200); // a command sent late would have landed by now
    expect({ subtype: acquireError.subtype, cause: (acquireError.cause as Error).name, lock: acquireError.lock }).to.deep.equal({ subtype: 'DbError', cause: 'DeadlineExceededError', lock: undefined });
    expect(acquireError.message).to.match(/did not settle within 1000 ms .*never sent/);
    expect(commitError.message).to.match(/not applied: it was never sent/);
    expect({ subtype: commitError.subtype, applied: (commitError.data as { applied?: unknown }).applied }).to.deep.equal({ subtype: 'DbError', applied: false });
    expect(naming(watched.started, 'late')).to.deep.equal([]);
    expect(naming(watched.started, 'acc')).to.deep.equal(['findAndModify']); // its acquisition only
    expect((await collection.findOne({ _id: 'acc' as never }))?.balance).to.equal(100);
  });

  it('queues resource locks\' commands in the same gate as document locks\' of their client', async function () {
    this.timeout(30_000);
    const { client, collection } = await oneAtATime([{ _id: 'blocker' }, { _id: 'warm' }]);
    const resources = client.db(collection.dbName).collection(`${collection.collectionName}_resources`);
    const watched = watchLockCommands(client, resources.collectionName);
    const held = gate();
    const { slow, holding } = withBlocker(collection, held.promise);
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
    await (await locks.acquire({ _id: 'warm' })).release();
    const resourceLock = resourceLocks({ collection: resources, timeout: 1_000 });
    await (await resourceLock.xlock('r', 'first')).release();
    const sentBefore = watched.started.length;
    const blocker = locks.acquire({ _id: 'blocker' });
    await holding;
    const error = await rejectionOf(resourceLock.xlock('r', 'second'));
    const sentWhileBlocked = watched.started.length - sentBefore;
    held.open();
    await (await blocker).release();
    expect({ subtype: error.subtype, cause: (error.cause as Error | undefined)?.name }).to.deep.equal({ subtype: 'DbError', cause: 'DeadlineExceededError' });
    expect(sentWhileBlocked).to.equal(0);
  });

  it('stamps a write when it leaves the queue: one held 1.5 s behind another (beyond the stamp\'s tolerance) is not refused as late', async function () {
    this.timeout(30_000);
    const { client, collection } = await oneAtATime([{ _id: 'blocker' }, { _id: 'queued' }, { _id: 'warm' }]);
    const watched = watchLockCommands(client, collection.collectionName);
    const held = gate();
    const { slow, holding } = withBlocker(collection, held.promise);
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
    await (await locks.acquire({ _id: 'warm' })).release(); // the clock's bounds and round trip are known: the tight tolerance applies
    const blocker = locks.acquire({ _id: 'blocker' });
    await holding;
    const queued = locks.acquire({ _id: 'queued' });
    await untilQueued(collection, 1);
    await sleep(1_500);
    held.open();
    await Promise.all([blocker, queued]);
    expect(naming(watched.started, 'queued')).to.deep.equal(['findAndModify']); // no refusal, no read to explain it, no second try
  });

  it('settles every queued stamped write that fails before sending (5,000 queued when a sharded cluster\'s clocks show a skew beyond maxClockSkew), and frees the slot', async function () {
    this.timeout(60_000);
    const queued = 5_000;
    const client = await newClient({ maxPoolSize: 5 });
    const shared = await freshCollection([{ _id: 'doc' }]);
    let ahead = 0;
    const cluster = simulatedCluster(client.db(shared.dbName).collection(shared.collectionName), { routers: [{ offsetMs: () => ahead }] });
    const held = gate();
    // The read that will show the router 15 s ahead holds the only slot until `held` opens.
    const slow = delayedCollection(cluster, { request: (method) => (method === 'aggregate' && ahead > 0 ? held.promise : 0) });
    const commandGate = commandGateOf(slow);
    expect(commandGate.cap).to.equal(1);
    const locks = multiLock({ collection: slow, timeout: 30_000, maxClockSkew: 100, locktimeouts: { read: 10_000 }, lockRelationships: { read: { cooperative: [] } } });
    await (await locks.acquire({ _id: 'doc' }, { tag: 'read' })).release(); // both clocks seen: no read before a stamp
    ahead = 15_000;
    const reading = locks.inspect({ _id: 'doc' }).then(() => 'resolved', (error: Error) => error.message);
    for (let i = 0; i < 400 && commandGate.inFlight < 1; i++) await sleep(5);
    let settled = 0;
    const outcomes = Array.from({ length: queued }, () => locks.acquire({ _id: 'doc' }, { tag: 'read' }).then(() => 'acquired', (error: Error) => error.message).finally(() => settled++));
    for (let i = 0; i < 2_000 && commandGate.waiting < queued; i++) await sleep(10);
    expect(commandGate.waiting).to.equal(queued);
    held.open();
    expect(await reading).to.match(/clocks are at least \d+ ms apart/);
    for (let i = 0; i < 200 && settled < queued; i++) await sleep(50);
    // Each queued write is admitted, finds the skew before stamping, and sends nothing: each must fail at once, and its slot pass on.
    expect({ settled, inFlight: commandGate.inFlight, waiting: commandGate.waiting }).to.deep.equal({ settled: queued, inFlight: 0, waiting: 0 });
    expect(new Set((await Promise.all(outcomes)).map((outcome) => outcome.replace(/\d+ ms/, 'n ms').slice(0, 60)))).to.have.lengthOf(1);
  });

  it('keeps a waiting acquisition waiting when its attempt was never sent (queued past its timeout): it acquires once the slot comes back, within its wait', async function () {
    this.timeout(30_000);
    const { collection, watched, held, locks, block } = await oneSlotBlocked([{ _id: 'free' }], 1_000);
    const { blocker } = await block();
    const waiting = locks.acquire({ _id: 'free' }, { wait: 10_000 }).then((handle) => handle, (error: Error) => error);
    await untilQueued(collection, 1);
    await sleep(1_500); // its first attempt's 1 s passed in the queue: never sent, nothing written
    held.open();
    await (await blocker).release();
    const outcome = await waiting;
    // The document was free all along and 8.5 s of the wait are left: an attempt that was never sent is no reason to stop waiting.
    expect(outcome instanceof Error ? outcome.message : 'acquired').to.equal('acquired');
    expect(naming(watched.started, 'free')[0]).to.equal('findAndModify');
  });

  it('sends a command that waited in the queue with what is left of its timeout as maxTimeMS: the server gives up when its caller does, and its slot is not freed while it still runs', async function () {
    this.timeout(30_000);
    const { collection, watched, held, locks, block } = await oneSlotBlocked([{ _id: 'queued' }], 3_000);
    const { blocker } = await block();
    const queued = locks.acquire({ _id: 'queued' });
    await untilQueued(collection, 1);
    await sleep(1_500);
    held.open();
    await Promise.all([blocker.then((handle) => handle.release()), queued.then((handle) => handle.release())]);
    const sent = watched.started.find((event) => JSON.stringify(event.command).includes('"queued"'));
    // It waited at least 1.5 s of its 3 s: the server must not be told it has 3 s more (the caller's deadline frees the slot 1.5 s before that).
    expect(sent?.command.maxTimeMS).to.be.at.most(1_500);
  });

  const GROUP_CALLS = [
    { name: 'unlock(lockId), a release', call: (locks: ReturnType<typeof resourceLocks>) => locks.unlock('g1') },
    { name: 'renew(lockId), an extension', call: (locks: ReturnType<typeof resourceLocks>) => locks.renew('g1', 10_000) },
  ];
  for (const { name, call } of GROUP_CALLS) {
    it(`sends a resource ${name}, before the attempts queued ahead of it`, async function () {
      this.timeout(30_000);
      const { client, collection } = await oneAtATime([{ _id: 'blocker' }, { _id: 'warm' }]);
      const resources = client.db(collection.dbName).collection(`${collection.collectionName}_resources`);
      const watched = watchLockCommands(client, resources.collectionName);
      const held = gate();
      const { slow, holding } = withBlocker(collection, held.promise);
      const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
      await (await locks.acquire({ _id: 'warm' })).release();
      const resourceLock = resourceLocks({ collection: resources, timeout: 20_000 });
      await resourceLock.xlock('held', 'g1');
      await (await resourceLock.xlock('other', 'g2')).release();
      const blocker = locks.acquire({ _id: 'blocker' });
      await holding;
      const attempt = resourceLock.xlock('other', 'g3');
      await untilQueued(collection, 1);
      const grouped = call(resourceLock);
      await untilQueued(collection, 2);
      const from = watched.started.length;
      held.open();
      await Promise.all([blocker, attempt, grouped]);
      const order = watched.started.slice(from).map((event) => (JSON.stringify(event.command).includes('"g3"') ? 'attempt' : 'group'));
      expect(order[0]).to.equal('group');
    });
  }
});
