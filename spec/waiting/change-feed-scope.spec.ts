/**
 * A process's change stream carries only the documents its waiters wait on (a server-side `$match`
 * on `documentKey._id`, and events that name no document), reopened after the last resume token
 * when that set changes, at most once per RESCOPE_MS; above MOST_IDS documents, the whole
 * collection. On mongo-java-server update events name no document (they pass, see
 * remote-wake-ups.ts), so these tests use deletes, whose events carry `documentKey._id` there too.
 */
import { expect } from 'chai';
import { Long, type ChangeStream, type ChangeStreamOptions, type Collection, type Document } from 'mongodb';
import { writeLock, type LockHandle } from '../../lib';
import { lockChanges } from '../../lib/waiting/change-feed';
import { MOST_IDS, WatchedIds } from '../../lib/waiting/watched-ids';
import { outcomeOf, until } from '../support/lock-commands';
import { freshCollection, newClient, requireCapability, sleep } from '../support/fixture';
import { streamProcess } from '../support/stream-process';
import { SAFETY_POLL, SAFETY_POLL_JITTER } from '../../lib/waiting/wake-up-source';

/** The `_id`s the stream's first stage selects (undefined: it selects by no `_id`). */
function idsOf(stream: ChangeStream): unknown[] | undefined {
  const first = (stream as unknown as { pipeline: Document[] }).pipeline[0]?.$match as Document | undefined;
  return (first?.$or as Document[] | undefined)?.[0]?.['documentKey._id']?.$in as unknown[] | undefined;
}

/** The `_id`s named by the documentKey of `events` (as strings). */
const named = (events: readonly Document[]): string[] => events.map((event) => (event.documentKey as Document | undefined)?._id).filter((id) => id !== undefined).map(String);

describe('a change stream that carries only the documents waited on', function () {
  this.timeout(60_000);

  it('a process waiting on document A is not sent the changes of other documents, and is sent those of A', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 'A' }]);
    await writeLock({ collection, locktimeout: 60_000 }).acquire({ _id: 'A' });
    const process = await streamProcess(collection);
    const waiting = outcomeOf(writeLock({ collection: process.collection, locktimeout: 10_000 }).acquire({ _id: 'A' }, { wait: 30_000 }));
    // What a stream of the whole collection receives meanwhile (the control).
    const whole = collection.watch(lockChanges('lock'));
    await whole.tryNext();
    await sleep(500);
    for (let i = 0; i < 30; i++) {
      await collection.insertOne({ _id: `B${i}` } as Document);
      await collection.deleteOne({ _id: `B${i}` } as Document);
    }
    const seen: string[] = [];
    await until(async () => {
      const event = await whole.tryNext();
      if (event) seen.push(...named([event]));
      return seen.length >= 30;
    });
    await whole.close();
    await sleep(300);
    const what = `the whole collection's stream received ${seen.length} deletes of other documents; the waiting process ${named(process.events).length} (${named(process.events).join(', ')})`;
    console.log(`      ${what}`);
    expect(seen.length, what).to.equal(30);
    expect(named(process.events), what).to.deep.equal([]);
    // A's own change reaches it: its deletion nudges the waiter, whose attempt finds no document.
    await collection.deleteOne({ _id: 'A' } as Document);
    const outcome = await waiting;
    expect(outcome === 'resolved' ? outcome : outcome.subtype, 'the waiter learnt that its document is gone').to.equal('RessourceNotFound');
    expect(named(process.events), 'the waiting process was sent the deletion of A').to.deep.equal(['A']);
  });

  it('a numeric _id matches by value: a filter naming 7 is sent the changes of the document whose _id is Long(7)', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: Long.fromNumber(7) }]);
    await writeLock({ collection, locktimeout: 60_000 }).acquire({ _id: 7 });
    const process = await streamProcess(collection);
    const waiting = outcomeOf(writeLock({ collection: process.collection, locktimeout: 10_000 }).acquire({ _id: 7 }, { wait: 30_000 }));
    await sleep(500);
    await collection.deleteOne({ _id: Long.fromNumber(7) } as Document);
    const outcome = await waiting;
    expect(outcome === 'resolved' ? outcome : outcome.subtype).to.equal('RessourceNotFound');
    expect(named(process.events), 'the deletion of Long(7) reached the waiter of 7').to.deep.equal(['7']);
  });

  it('a spike of new waiters reopens the stream a few times, not once per waiter; a later waiter is added by one more reopening', async function () {
    requireCapability(this, 'changeStreams');
    const count = 60;
    const collection = await freshCollection(Array.from({ length: count + 1 }, (_, i) => ({ _id: i })));
    const holder = writeLock({ collection, locktimeout: 60_000 });
    const held = await Promise.all(Array.from({ length: count + 1 }, (_, i) => holder.acquire({ _id: i })));
    const process = await streamProcess(collection);
    const lock = writeLock({ collection: process.collection, locktimeout: 10_000 });
    const waiting: Array<Promise<LockHandle>> = [];
    for (let i = 0; i < count; i++) {
      waiting.push(lock.acquire({ _id: i }, { wait: 30_000 }));
      if (i % 10 === 9) await sleep(20); // they come over about 100 ms
    }
    await sleep(1_000);
    const spike = process.streams.length;
    const last = process.streams[spike - 1]!;
    const what = `${spike} stream(s) opened for ${count} new waiters; the last selects ${idsOf(last)?.length} _id(s)`;
    console.log(`      ${what}`);
    expect(spike, what).to.be.at.most(5);
    expect(idsOf(last)?.map(Number).sort((a, b) => a - b), what).to.deep.equal(Array.from({ length: count }, (_, i) => i));
    waiting.push(lock.acquire({ _id: count }, { wait: 30_000 }));
    expect(await until(() => idsOf(process.streams[process.streams.length - 1]!)?.length === count + 1), 'reopened for the new waiter').to.equal(true);
    await Promise.all(held.map((handle) => handle.release()));
    const won = await Promise.all(waiting);
    expect(won.map((handle) => handle.fence)).to.deep.equal(held.map((handle) => handle.fence + 1));
    await Promise.all(won.map((handle) => handle.release()));
  });

  it('a release made while the stream is reopened for another waiter reaches its waiter, asleep long, well before a safety poll: no event is lost between the two streams', async function () {
    requireCapability(this, 'changeStreams');
    const rounds = 8;
    const collection = await freshCollection(Array.from({ length: 2 * rounds }, (_, i) => ({ _id: i })));
    const holder = writeLock({ collection, locktimeout: 60_000 });
    const held = await Promise.all(Array.from({ length: 2 * rounds }, (_, i) => holder.acquire({ _id: i })));
    const process = await streamProcess(collection);
    const lock = writeLock({ collection: process.collection, locktimeout: 10_000 });
    const waiting = Array.from({ length: rounds }, (_, i) => lock.acquire({ _id: i }, { wait: 30_000 }));
    await sleep(3_000); // refused, explained, the stream covers them and answered: they sleep long
    const late: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const streams = process.streams.length;
      // A new waiter: the stream is reopened for it within RESCOPE_MS; the release comes 0 to 140 ms after it joined, about as the old stream is dropped.
      const newcomer = lock.acquire({ _id: rounds + round }, { wait: 30_000 });
      await sleep(20 * (round % 8));
      const released = performance.now();
      await held[round]!.release();
      const won = await waiting[round]!;
      const after = performance.now() - released;
      if (after >= SAFETY_POLL * (1 - SAFETY_POLL_JITTER)) late.push(`round ${round}: ${after.toFixed(0)} ms (${process.streams.length - streams} stream(s) opened)`);
      expect(won.fence).to.equal(held[round]!.fence + 1);
      await won.release();
      await held[rounds + round]!.release();
      await (await newcomer).release();
    }
    console.log(`      ${late.length} of ${rounds} releases made during a reopening reached their waiter a safety poll late; ${process.streams.length} streams opened`);
    expect(late, 'releases whose event was lost between two streams').to.deep.equal([]);
  });

  it('a server that refuses startAfter: the stream is reopened without it, and the waiters still acquire', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 'other' }]);
    const holder = writeLock({ collection, locktimeout: 60_000 });
    const held = await Promise.all([holder.acquire({ _id: 1 }), holder.acquire({ _id: 2 })]);
    const client = await newClient();
    const opened: Array<ChangeStreamOptions | undefined> = [];
    const plain = client.db(collection.dbName).collection(collection.collectionName);
    const refusing = new Proxy(plain, {
      get(target, key) {
        if (key !== 'watch') return (Reflect.get(target, key, target) as unknown);
        return (pipeline: Document[], options?: ChangeStreamOptions) => {
          opened.push(options);
          const stream = target.watch(pipeline, options);
          if (options?.startAfter === undefined) return stream;
          // As a server that does not know the token: the opening fails (ChangeStreamFatalError).
          void stream.close();
          return Object.assign(Object.create(stream) as ChangeStream, { tryNext: () => Promise.reject(Object.assign(new Error('injected: startAfter refused'), { code: 280 })), close: () => Promise.resolve() });
        };
      },
    }) as Collection<Document>;
    const lock = writeLock({ collection: refusing, locktimeout: 10_000 });
    const first = lock.acquire({ _id: 1 }, { wait: 30_000 });
    await sleep(500);
    // An event that names no document gives the stream a resume token (mongo-java-server sends none before an event).
    await collection.updateOne({ _id: 'other' } as Document, { $set: { lock: { touched: true } } });
    await sleep(300);
    const second = lock.acquire({ _id: 2 }, { wait: 30_000 });
    expect(await until(() => opened.filter((options) => options?.startAfter !== undefined).length > 0 && opened.length >= 3), `streams opened: ${opened.length}`).to.equal(true);
    expect(opened[opened.length - 1]?.startAfter, 'the last stream was opened without the token').to.equal(undefined);
    await Promise.all(held.map((handle) => handle.release()));
    const won = await Promise.all([first, second]);
    expect(won.map((handle) => handle.fence)).to.deep.equal(held.map((handle) => handle.fence + 1));
    await Promise.all(won.map((handle) => handle.release()));
  });
});

describe('the documents a feed watches (WatchedIds)', () => {
  it('above MOST_IDS documents it watches the whole collection; back under half of it, their _ids again', () => {
    const ids = new WatchedIds();
    const wanted = Array.from({ length: MOST_IDS + 1 }, (_, i) => ids.want(i));
    expect(ids.next()).to.equal('all');
    ids.live('all', 0, false);
    expect(ids.covers('number:5', 1), 'the whole collection covers every document').to.equal(true);
    wanted.slice(0, MOST_IDS / 2 + 1).forEach((wants) => wants.unwant());
    expect(ids.stale, 'back under half of MOST_IDS').to.equal(true);
    const next = ids.next();
    expect(next === 'all' ? next : next.ids.length).to.equal(MOST_IDS / 2);
    // Continued after the whole collection's token: what both watch stays covered since before.
    ids.live(next, 10, true);
    expect(ids.covers(`number:${MOST_IDS}`, 1)).to.equal(true);
    ids.live(next, 20, false);
    expect(ids.covers(`number:${MOST_IDS}`, 10), 'without continuity, covered only from the new stream on').to.equal(false);
  });
});
