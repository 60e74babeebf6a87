/**
 * Past what the server serves, a client keeps the leases it holds before it takes new ones: while
 * its lease keepers are behind, its attempts are held back; a release its keeper gave up waits
 * behind extensions; thousands of queued commands whose deadline passed fail in slices, not in one
 * synchronous loop that would hold the keepers' timers up.
 */
import { expect } from 'chai';
import type { Collection, CommandStartedEvent, Document, MongoClient } from 'mongodb';
import { writeLock } from '../../lib';
import { ATTEMPTS_WHILE_BEHIND } from '../../lib/engine/attempt-throttle';
import { commandGateOf } from '../../lib/engine/command-gate';
import { Handle } from '../../lib/locks/lock-handle';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../support/fixture';
import { gate, isAcquisition } from '../support/lock-commands';

/** The largest number of `findAndModify` commands of `client` in flight at once, from now, while `counting()`. */
function maxFindAndModifyInFlight(client: MongoClient, counting: () => boolean): () => number {
  const open = new Set<number>();
  let max = 0;
  client.on('commandStarted', (event: CommandStartedEvent) => {
    if (event.commandName !== 'findAndModify') return;
    open.add(event.requestId);
    if (counting()) max = Math.max(max, open.size);
  });
  const done = ({ requestId }: { requestId: number }): void => void open.delete(requestId);
  client.on('commandSucceeded', done);
  client.on('commandFailed', done);
  return () => max;
}

/** Resolves once `collection`'s client has `count` lock commands queued (a loaded machine may bring them late), failing after 10 s. */
async function untilWaiting(collection: Collection<Document>, count: number): Promise<void> {
  const commandGate = commandGateOf(collection);
  for (let i = 0; i < 1_000 && commandGate.waiting < count; i++) await sleep(10);
  expect(commandGate.waiting, 'commands queued').to.equal(count);
}

describe('a client keeps its leases before it takes new ones', () => {
  it(`while its keepers are behind, it sends at most ${ATTEMPTS_WHILE_BEHIND} acquisition attempts at once; then every queued one is sent`, async function () {
    this.timeout(60_000);
    const client = await newClient({ monitorCommands: true });
    const ids = Array.from({ length: 40 }, (_, i) => `a${i}`);
    const shared = await freshCollection([...ids, 'warm'].map((_id) => ({ _id })));
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    // Each acquisition takes 150 ms on its way: unthrottled, all 40 would be in flight together.
    const slow = delayedCollection(collection, { request: (method, _n, args) => (isAcquisition(method, args) ? 150 : 0) });
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 30_000, changeStreams: false });
    await (await locks.acquire({ _id: 'warm' })).release();
    let held = true;
    const maxHeld = maxFindAndModifyInFlight(client, () => held);
    const holdMs = 1_500;
    commandGateOf(collection).keepersBehind(holdMs);
    const acquisitions = ids.map((_id) => locks.acquire({ _id }));
    // Count only what is sent well within the hold (a loaded machine may start the calls late).
    await sleep(holdMs / 2);
    held = false;
    const handles = await Promise.all(acquisitions);
    expect(handles).to.have.length(ids.length);
    expect(maxHeld()).to.be.within(1, ATTEMPTS_WHILE_BEHIND);
    await Promise.all(handles.map((handle) => handle.release()));
  });

  it('sends an extension at once while its attempts are held back', async function () {
    this.timeout(60_000);
    const client = await newClient({ monitorCommands: true });
    const ids = Array.from({ length: 20 }, (_, i) => `b${i}`);
    const shared = await freshCollection([...ids, 'kept'].map((_id) => ({ _id })));
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    const opened = gate();
    const slow = delayedCollection(collection, { request: (method, _n, args) => (isAcquisition(method, args) && !JSON.stringify(args[0]).includes('"kept"') ? opened.promise : 0) });
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 30_000, changeStreams: false });
    const kept = await locks.acquire({ _id: 'kept' });
    commandGateOf(collection).keepersBehind(20_000);
    const acquisitions = ids.map((_id) => locks.acquire({ _id }));
    await untilWaiting(collection, ids.length - ATTEMPTS_WHILE_BEHIND);
    // Attempts wait (at most the throttle's few are on their way, held by the gate above); the extension is not queued behind them.
    const extended = await Promise.race([kept.extend(10_000).then(() => 'extended'), sleep(10_000).then(() => 'waited')]);
    expect(extended).to.equal('extended');
    expect(commandGateOf(collection).waiting).to.equal(ids.length - ATTEMPTS_WHILE_BEHIND);
    opened.open();
    const handles = await Promise.all(acquisitions);
    await Promise.all([kept, ...handles].map((handle) => handle.release()));
  });

  it('sends a release its lease keeper gave up (a cleanup) after an extension and a release queued after it', async function () {
    this.timeout(30_000);
    const client = await newClient({ maxPoolSize: 5, monitorCommands: true });
    const shared = await freshCollection(['blocker', 'lapsed', 'ext', 'rel'].map((_id) => ({ _id })));
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    expect(commandGateOf(collection).cap).to.equal(1);
    const order: string[] = [];
    client.on('commandStarted', (event) => {
      const named = ['blocker', 'lapsed', 'ext', 'rel'].find((id) => JSON.stringify(event.command).includes(`"${id}"`));
      if (named && (event.commandName === 'update' || event.commandName === 'findAndModify')) order.push(`${event.commandName} ${named}`);
    });
    const held = gate();
    let holding!: () => void;
    const blocked = new Promise<void>((resolve) => (holding = resolve));
    // The blocker's reply is held, not its request: a request held past its stamp's tight tolerance
    // (100 ms and four round trips: a loaded machine's late timers) would be refused and sent again.
    const slow = delayedCollection(collection, {
      reply: (method, _n, args) => {
        if (method !== 'findOneAndUpdate' || !JSON.stringify(args[0]).includes('"blocker"')) return 0;
        holding();
        return held.promise;
      },
    });
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 20_000, changeStreams: false });
    const lapsed = await locks.acquire({ _id: 'lapsed' });
    const extending = await locks.acquire({ _id: 'ext' });
    const releasing = await locks.acquire({ _id: 'rel' });
    Handle.lapse(lapsed as unknown as Handle);
    const from = order.length;
    const blocker = locks.acquire({ _id: 'blocker' });
    await blocked;
    const queued = [lapsed.release()];
    await untilWaiting(collection, 1);
    queued.push(extending.extend(10_000).then(() => undefined));
    await untilWaiting(collection, 2);
    queued.push(releasing.release());
    await untilWaiting(collection, 3);
    held.open();
    await Promise.all([blocker, ...queued]);
    expect(order.slice(from)).to.deep.equal(['findAndModify blocker', 'update rel', 'findAndModify ext', 'update lapsed']);
    await Promise.all([(await blocker).release(), extending.release()]);
  });

  it('fails thousands of queued commands whose deadline passed in slices: a timer runs between the first failure and the last', async function () {
    this.timeout(60_000);
    const client = await newClient({ maxPoolSize: 5 });
    const ids = Array.from({ length: 3_000 }, (_, i) => `q${i}`);
    const shared = await freshCollection([{ _id: 'blocker' } as Document, ...ids.map((_id) => ({ _id }))]);
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    const held = gate();
    const slow = delayedCollection(collection, { request: (method, _n, args) => (method === 'findOneAndUpdate' && JSON.stringify(args[0]).includes('"blocker"') ? held.promise : 0) });
    const blocking = writeLock({ collection: slow, locktimeout: 10_000, timeout: 30_000, changeStreams: false });
    const queued = writeLock({ collection: slow, locktimeout: 10_000, timeout: 1_500, changeStreams: false });
    await (await queued.acquire({ _id: 'q0' })).release();
    const blocker = blocking.acquire({ _id: 'blocker' });
    await sleep(100);
    const failedAt: number[] = [];
    const ticks: number[] = [];
    const ticking = setInterval(() => ticks.push(performance.now()), 1);
    // The process is busy (as one is under load) from before the first deadline to after the last: all of them pass together.
    const busy = setTimeout(() => {
      for (const until = performance.now() + 1_200; performance.now() < until; );
    }, 1_300);
    const outcomes = await Promise.all(ids.map((_id) => queued.acquire({ _id }).then(() => 'acquired', (error: Error & { subtype?: string }) => (failedAt.push(performance.now()), error.subtype ?? error.name))));
    clearInterval(ticking);
    clearTimeout(busy);
    held.open();
    await (await blocker).release();
    expect(new Set(outcomes)).to.deep.equal(new Set(['DbError']));
    const first = Math.min(...failedAt);
    const last = Math.max(...failedAt);
    expect(ticks.some((at) => at > first && at < last)).to.equal(true);
  });
});
