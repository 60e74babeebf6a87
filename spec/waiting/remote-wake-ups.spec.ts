/**
 * Wake-ups from changes made elsewhere (a change stream per client) are hints: they never make a
 * waiter send more than a small multiple of what it sends polling, whatever it writes itself.
 *
 * Change streams report every write, findAndModify included (mongod; mongo-java-server as
 * support/java starts it): a ticket renewal sets `lock.queue.<n>.exp`, `lock.now` and
 * `lock.until`, which monglock's filter (lockChanges) leaves out, so a waiter's own looks wake
 * nobody (spec/waiting/lock-changes.spec.ts checks the filter itself, on documents shaped like
 * change events).
 */
import { expect } from 'chai';
import type { ChangeStream, Collection, CommandStartedEvent, Document, MongoClient } from 'mongodb';
import { writeLock } from '../../lib';
import { withdrawOperation } from '../../lib/protocol/release';
import { LockPaths } from '../../lib/protocol/stored-format';
import { changeFeedOf } from '../../lib/waiting/change-feed';
import { UNPLACED_NUDGES } from '../../lib/waiting/remote-wake-ups';
import { LocalWaiters } from '../../lib/waiting/local-waiters';
import { Waiter } from '../../lib/waiting/waiter';
import { freshCollection, newClient, requireCapability, sleep } from '../support/fixture';
import { watchedCollection } from '../support/watched-collection';

/** `collection` on `client`. */
function onClient(client: MongoClient, collection: Collection<Document>): Collection<Document> {
  return client.db(collection.dbName).collection(collection.collectionName);
}

/** findAndModify commands `client` sends while `body` runs. */
async function findAndModifiesOf(client: MongoClient, body: () => Promise<void>): Promise<number> {
  let count = 0;
  const count1 = (event: CommandStartedEvent): void => {
    if (event.commandName === 'findAndModify') count++;
  };
  client.on('commandStarted', count1);
  try {
    await body();
  } finally {
    client.off('commandStarted', count1);
  }
  return count;
}

/**
 * A fair waiter (its own client) queued behind another fair waiter (another client), both behind a
 * holder (a third client): the findAndModify commands (looks and attempts) the second waiter
 * sends in `windowMs` while the lock stays held.
 */
async function secondInLineCommands(changeStreams: boolean, windowMs: number): Promise<number> {
  const collection = await freshCollection([{ _id: 1 }]);
  const holder = writeLock({ collection, locktimeout: 20_000 });
  const [firstClient, secondClient] = [await newClient({ monitorCommands: true }), await newClient({ monitorCommands: true })];
  const first = writeLock({ collection: onClient(firstClient, collection), locktimeout: 20_000, fair: true, changeStreams });
  const second = writeLock({ collection: onClient(secondClient, collection), locktimeout: 20_000, fair: true, changeStreams });
  const held = await holder.acquire({ _id: 1 });
  const firstWaits = first.acquire({ _id: 1 }, { wait: 20_000 });
  await sleep(300); // refused; its ticket is first in the queue
  const secondWaits = second.acquire({ _id: 1 }, { wait: 20_000 });
  await sleep(300); // refused; its ticket is second: one ticket ahead
  const sent = await findAndModifiesOf(secondClient, () => sleep(windowMs));
  await held.release();
  await (await firstWaits).release();
  await (await secondWaits).release();
  return sent;
}

describe('wake-ups from changes made elsewhere', function () {
  this.timeout(60_000);

  it('a fair waiter with one ticket ahead is not woken by the changes its own looks make: it looks about as often as it would polling', async function () {
    requireCapability(this, 'changeStreams');
    const windowMs = 2_000;
    const polled = await secondInLineCommands(false, windowMs);
    const streamed = await secondInLineCommands(true, windowMs);
    const what = `the second fair waiter sent ${streamed} findAndModify in ${windowMs} ms with change streams, ${polled} polling`;
    console.log(`      ${what}`);
    expect(streamed, what).to.be.at.most(2 * polled + 10);
  });
});

describe('wake-ups from changes made elsewhere to a lock held in the waiter\'s own process', function () {
  this.timeout(60_000);

  it('a waiter whose own process holds the lock is woken when another process takes that lock away (the CLI\'s release), not at its next 1 s poll', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    // One lock instance (one process's waiters), on a client of its own: its holder and its waiter.
    const client = await newClient();
    const lock = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: 30_000 });
    const paths = new LockPaths('lock');
    const elsewhere = writeLock({ collection, locktimeout: 30_000 }); // the fixture's client: another process
    /** ms from the CLI's release of a hung holder's lock (held by `holder`) to the acquisition of a waiter of `lock`, in 3 rounds. */
    const afterCliRelease = async (holder: typeof lock): Promise<number[]> => {
      const delays: number[] = [];
      for (let round = 0; round < 3; round++) {
        const stuck = await holder.acquire({ _id: 1 }); // a holder that does not release (hung), its lease long
        const waiting = lock.acquire({ _id: 1 }, { wait: 10_000 });
        await sleep(200); // the waiter is refused, and sleeps
        // The CLI's `release --doc 1 --tag write --yes` (another process): withdraws exactly that entry, as it does.
        const { filter, update } = withdrawOperation(paths, { _id: 1 }, 'write', stuck.id);
        expect((await collection.updateOne(filter, update, { writeConcern: { w: 'majority' } })).modifiedCount, 'the CLI released the lock').to.equal(1);
        const released = performance.now();
        const won = await waiting;
        delays.push(performance.now() - released);
        await won.release();
        await stuck.release().catch(() => undefined); // LockNotFound: the CLI took it away
      }
      return delays;
    };
    const other = await afterCliRelease(elsewhere);
    const own = await afterCliRelease(lock);
    const show = (delays: number[]): string => delays.map((ms) => ms.toFixed(0)).join(', ');
    const what = `after the CLI's release, the waiter acquired in ${show(own)} ms when the hung holder was in its own process, ${show(other)} ms when it was in another`;
    console.log(`      ${what}`);
    const median = (delays: number[]): number => [...delays].sort((a, b) => a - b)[1]!;
    expect(median(other), `${what}: the stream wakes a waiter of another process`).to.be.below(400);
    expect(median(own), what).to.be.below(400);
  });
});

describe('the nudges of a lone waiter of another process', function () {
  this.timeout(120_000);

  it('a release that follows, within the backoff\'s memory, the acquisition that woke the waiter in vain still wakes it (no backoff for one miss)', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    const client = await newClient();
    // This process's waiters of the collection, with its change stream; the changes come from the fixture's client (another process).
    const waiters = new LocalWaiters(() => Date.now(), changeFeedOf(client.db(collection.dbName).collection(collection.collectionName), 'lock'));
    const blockedBy = new Set(['write']);
    const change = (value: unknown): Promise<unknown> => collection.updateOne({ _id: 1 } as Document, value === undefined ? { $unset: { lock: '' } } : { $set: { lock: value } });
    /** ms until `asleep` ends (a nudge, or its whole 5 s). */
    const sleeping = async (asleep: Promise<void>): Promise<number> => {
      const start = performance.now();
      await asleep;
      return performance.now() - start;
    };
    // Until the stream delivers: a waiter's sleep is ended by a change.
    const first = waiters.join(1, 'write', blockedBy, () => [0, '']);
    for (let tries = 0; ; tries++) {
      const woken = sleeping(first.sleep(300));
      await change({ warmUp: tries });
      if ((await woken) < 250) break;
      expect(tries, 'the change stream delivers a change within 20 tries').to.be.below(20);
    }
    first.leave(false);
    const releaseWaits: number[] = [];
    for (let round = 0; round < 8; round++) {
      const waiter = waiters.join(1, 'write', blockedBy, () => [round + 1, '']);
      // Another process acquires: the change wakes the waiter, whose attempt is refused (it sleeps again: one miss).
      const byAcquisition = sleeping(waiter.sleep(5_000));
      await change({ round, holder: 'elsewhere' });
      expect(await byAcquisition, 'the acquisition elsewhere woke the waiter').to.be.below(4_000);
      const byRelease = sleeping(waiter.sleep(5_000));
      // The holder's section was short: its release comes at once.
      await change(undefined);
      releaseWaits.push(await byRelease);
      waiter.leave(true);
    }
    const what = `after the release, the waiter was woken in ${releaseWaits.map((ms) => ms.toFixed(0)).join(', ')} ms`;
    console.log(`      ${what}`);
    expect(releaseWaits.filter((ms) => ms >= 4_000), `${what}: each release woke it (not its 5 s poll)`).to.deep.equal([]);
  });
});

describe('a waiter asleep long whose nudge the backoff skips', function () {
  this.timeout(60_000);

  it('a release the backoff does not nudge for still ends its long sleep within a short poll, not a safety poll later', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    const client = await newClient();
    const waiters = new LocalWaiters(() => Date.now(), changeFeedOf(onClient(client, collection), 'lock'));
    const change = (value: unknown): Promise<unknown> => collection.updateOne({ _id: 1 } as Document, value === undefined ? { $unset: { lock: '' } } : { $set: { lock: value } });
    const waiter = waiters.join(1, 'write', new Set(['write']), () => [0, '']);
    // Until the stream delivers, and covers the waiter since before its last attempt (the end of its last sleep).
    for (let tries = 0; ; tries++) {
      const start = performance.now();
      const woken = waiter.sleep(300);
      await change({ warmUp: tries });
      await woken;
      if (performance.now() - start < 250) break;
      expect(tries, 'the change stream delivers a change within 20 tries').to.be.below(20);
    }
    await sleep(100);
    await waiter.sleep(10); // its last attempt starts after the stream went live
    waiter.refused(true, undefined); // a read explained it: a conflict, no lease end known
    const random = Math.random;
    try {
      Math.random = () => 0.9; // the backoff skips every nudge it may skip (2^-1 and below)
      // Its retry delay is a short poll; once the stream answers during a sleep, that sleep lasts long (a safety poll, 2.25–3.75 s).
      let start = 0;
      let asleep: Promise<void> | undefined;
      for (let tries = 0; !asleep; tries++) {
        expect(tries, 'a sleep armed long within 100 short polls').to.be.below(100);
        start = performance.now();
        let over = false;
        const sleeping = waiter.sleep(150, undefined, 30_000).then(() => void (over = true));
        await sleep(300);
        if (!over) asleep = sleeping;
      }
      // Two nudged attempts on the document were just refused (another process won it twice), then its holder releases.
      const remote = (waiters as unknown as { remote: { missed(key: string): void } }).remote;
      remote.missed('number:1');
      remote.missed('number:1');
      await change(undefined);
      const released = performance.now();
      await asleep;
      const what = `woken ${(performance.now() - released).toFixed(0)} ms after the release (asleep ${(released - start).toFixed(0)} ms before it)`;
      console.log(`      ${what}`);
      expect(performance.now() - released, what).to.be.below(1_000);
    } finally {
      Math.random = random;
      waiter.leave(true);
    }
  });
});

describe('a nudge and a release here that wake a waiter in the same turn', function () {
  it('the release decides: the attempt they start is a release\'s, and its refusal counts no nudge miss for the backoff', async function () {
    let misses = 0;
    // A waiter as LocalWaiters.join makes it, with nothing held here; nudgeMissed is what RemoteWakeUps.missed counts.
    const waiter = new Waiter(() => [0, ''], 'write', new Set(['write']), () => undefined, () => false, () => true, () => misses++);
    const asleep = waiter.sleep(5_000);
    waiter.nudge(); // a change made elsewhere (RemoteWakeUps)
    waiter.wake(); // a release here (LocalWaiters.released), before the woken waiter has run
    await asleep;
    // Its attempt is refused: it sleeps again (the second wake-up, kept for this sleep, ends it at once).
    await waiter.sleep(5_000);
    waiter.leave(false);
    expect(misses, 'nudge misses counted for an attempt a release here also woke').to.equal(0);
  });
});

/** A change stream whose events lose their `documentKey` on the way to the library, as the events of a backend that names no document (mongo-java-server's update events before support/java named them). */
function withoutDocumentKeys(stream: ChangeStream): ChangeStream {
  return new Proxy(stream, {
    get(target, key) {
      if (key === 'tryNext') return async () => stripKey(await target.tryNext());
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function stripKey(event: Document | null): Document | null {
  if (!event) return event;
  const named: Document = { ...event };
  delete named.documentKey;
  return named;
}

describe('a change whose event names no document', function () {
  this.timeout(60_000);

  it('does not wake every waiter of the process at once: at most UNPLACED_NUDGES at once, the others within a short poll', async function () {
    requireCapability(this, 'changeStreams');
    const count = 20;
    // The changes are made to a waited document (the stream carries only those), and lose its name on the way.
    const collection = await freshCollection([{ _id: 0 }]);
    const client = await newClient();
    const waiters = new LocalWaiters(() => Date.now(), changeFeedOf(watchedCollection(client, collection, withoutDocumentKeys), 'lock'));
    const joined = Array.from({ length: count }, (_, i) => waiters.join(i, 'write', new Set(['write']), () => [i, '']));
    // Until the stream delivers (it is reopened for the documents as they join): one change ends a sleep.
    for (let tries = 0; ; tries++) {
      const start = performance.now();
      const ends = joined.map((waiter) => waiter.sleep(300).then(() => performance.now() - start));
      await collection.updateOne({ _id: 0 } as Document, { $set: { lock: { warmUp: tries } } });
      if (Math.min(...(await Promise.all(ends))) < 250) break;
      expect(tries, 'the change stream delivers a change within 20 tries').to.be.below(20);
    }
    await sleep(200); // past UNPLACED_NUDGE_GAP_MS: each waiter may be nudged again
    const ended: number[] = [];
    const asleep = joined.map((waiter) => waiter.sleep(5_000).then(() => ended.push(performance.now())));
    await collection.updateOne({ _id: 0 } as Document, { $set: { lock: { holder: 'another process' } } });
    const written = performance.now();
    await Promise.all(asleep);
    // A cut-short sleep ends at least 75 ms after the event; the nudged ones end together as it comes, the first of them first:
    // only they end within 50 ms of the first. (Counted from the write's reply, a reply slowed by load let a cut-short one in once.)
    const first = Math.min(...ended);
    const atOnce = ended.filter((at) => at < first + 50).length;
    const what = `${atOnce} of ${count} waiters woken within 50 ms of the first (${Math.round(first - written)} ms after the write's reply), the last after ${Math.round(Math.max(...ended) - written)} ms`;
    console.log(`      ${what}`);
    expect(atOnce, what).to.be.at.most(UNPLACED_NUDGES);
    expect(Math.max(...ended) - written, `${what}: each within a short poll, not its 5 s sleep`).to.be.below(2_000);
    joined.forEach((waiter) => waiter.leave(true));
  });
});
