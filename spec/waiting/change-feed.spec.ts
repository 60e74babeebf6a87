/**
 * Waiters of another process (here: another driver client, whose lock instance shares no local
 * waiters with the holder's) are woken by the change stream of their collection when the holder
 * releases, instead of at their next poll; a stream that breaks leaves them polling, and the
 * stream is closed once nobody waits.
 */
import { expect } from 'chai';
import type { ChangeStream, Collection, Document, MongoClient } from 'mongodb';
import { writeLock } from '../../lib';
import { changeFeedOf } from '../../lib/waiting/change-feed';
import { freshCollection, newClient, requireCapability, sleep } from '../support/fixture';
import { watchedCollection } from '../support/watched-collection';

/** `collection` on `client`, with every change stream it opens recorded in `streams`. */
const watchedOn = (client: MongoClient, collection: Collection<Document>, streams: ChangeStream[] = []): Collection<Document> =>
  watchedCollection(client, collection, (stream) => (streams.push(stream), stream));

/** ms from the holder's release (resolved) to the waiter's acquisition, for each of `rounds` rounds. */
async function wakeUps(holderSide: Collection<Document>, waiterSide: Collection<Document>, changeStreams: boolean, rounds: number): Promise<number[]> {
  const holder = writeLock({ collection: holderSide, locktimeout: 10_000 });
  const waiter = writeLock({ collection: waiterSide, locktimeout: 10_000, changeStreams });
  const delays: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const held = await holder.acquire({ _id: 1 });
    const waiting = waiter.acquire({ _id: 1 }, { wait: 5_000 });
    await sleep(600); // the waiter is refused, and waits (its polls are 75-150 ms apart by now: a poll comes about 58 ms after a release)
    await held.release();
    const released = performance.now();
    const won = await waiting;
    delays.push(performance.now() - released);
    await won.release();
  }
  return delays;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

describe('waiters woken by a change stream', function () {
  this.timeout(60_000);

  it('a waiter on another client acquires right after the release there, well before its next poll would have tried', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    const [holderClient, waiterClient] = [await newClient(), await newClient()];
    const holderSide = watchedOn(holderClient, collection);
    const streams: ChangeStream[] = [];
    const waiterSide = watchedOn(waiterClient, collection, streams);
    const streamed: number[] = [];
    const polled: number[] = [];
    for (let round = 0; round < 5; round++) {
      streamed.push(...(await wakeUps(holderSide, waiterSide, true, 2)));
      polled.push(...(await wakeUps(holderSide, waiterSide, false, 2)));
    }
    const what = `after the release, the waiter acquired in ${streamed.map((ms) => ms.toFixed(1)).join(', ')} ms with the stream, ${polled.map((ms) => ms.toFixed(1)).join(', ')} ms polling`;
    console.log(`      ${what}`);
    // One stream at a time for the waiters of this client and collection (closed a second after the last waiter left, opened again by the next).
    expect(streams.slice(0, -1).every((stream) => stream.closed), `${streams.length} stream(s), one open at a time`).to.equal(true);
    expect(median(streamed), what).to.be.below(median(polled) / 2);
  });

  it('a stream that ends in the middle of a wait leaves the waiter polling (it still acquires once the lock is free), and is opened again', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    const streams: ChangeStream[] = [];
    const waiterSide = watchedOn(await newClient(), collection, streams);
    const holder = writeLock({ collection, locktimeout: 10_000 });
    const waiter = writeLock({ collection: waiterSide, locktimeout: 10_000 });
    const held = await holder.acquire({ _id: 1 });
    const waiting = waiter.acquire({ _id: 1 }, { wait: 10_000 });
    await sleep(200);
    expect(streams, 'the waiter opened a stream').to.have.length(1);
    await streams[0]!.close(); // the stream ends (as after an invalidate, or a resume token lost)
    await held.release();
    const won = await waiting;
    expect(won.fence, 'the waiter got the lock after the holder').to.equal(held.fence + 1);
    await won.release();
    // A second wait while the first stream is closed: the feed opens a new one.
    const again = await holder.acquire({ _id: 1 });
    const second = waiter.acquire({ _id: 1 }, { wait: 10_000 });
    await sleep(1_500);
    await again.release();
    await (await second).release();
    expect(streams.length, 'a new stream was opened for the next wait').to.equal(2);
    expect(streams[1]!.closed, 'and it is open while its feed lingers').to.equal(false);
  });

  it('the stream is closed once no waiter of its client and collection is left (after a short linger)', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 1 }]);
    const streams: ChangeStream[] = [];
    const waiterSide = watchedOn(await newClient(), collection, streams);
    const holder = writeLock({ collection, locktimeout: 10_000 });
    const held = await holder.acquire({ _id: 1 });
    const waiters = Array.from({ length: 3 }, () => writeLock({ collection: waiterSide, locktimeout: 10_000 }));
    const waiting = waiters.map((lock) => lock.acquire({ _id: 1 }, { wait: 10_000 }));
    await sleep(200);
    await held.release();
    await Promise.all(waiting.map(async (won) => (await won).release()));
    expect(streams, 'three lock instances, one client and collection: one stream').to.have.length(1);
    expect(changeFeedOf(waiterSide, 'lock').state, 'open a while after the last waiter left').to.equal('streaming');
    const cursorId = (streams[0] as unknown as { cursor?: { id?: unknown } }).cursor?.id;
    expect(cursorId, 'the stream has its server cursor').to.not.equal(undefined);
    await sleep(6_000);
    expect(streams[0]!.closed, 'closed after the linger').to.equal(true);
    expect(changeFeedOf(waiterSide, 'lock').state).to.equal('idle');
    // The server no longer has the cursor: killing it again finds nothing.
    const killed = await collection.db.command({ killCursors: collection.collectionName, cursors: [cursorId] });
    expect(killed.cursorsNotFound?.map(String), `the stream's server cursor is gone (${JSON.stringify(killed)})`).to.deep.equal([String(cursorId)]);
  });
});
