/**
 * Review 3: LocalWaiters keys documents by `${typeof id}:${String(id)}` (lib/local-waiters.ts,
 * keyOf). Every compound `_id` (`{ tenant, day }`) is `object:[object Object]`, and Date `_id`s
 * within one second share their key. A lock held here on one such document makes every other
 * look "held here": their waiters sleep 1 s between attempts (HELD_HERE_SLEEP) and are never
 * explained, and a release of one wakes the waiters of another.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 3 (fixed): local waiters of documents with compound _ids', () => {
  it('a lock held here on { tenant: "a" } does not slow the waiters of { tenant: "b" } to 1 s polls', async function () {
    this.timeout(20_000);
    const a = { tenant: 'a', day: 1 };
    const b = { tenant: 'b', day: 1 };
    const collection = await freshCollection([{ _id: a }, { _id: b }]);
    const local = writeLock({ collection, locktimeout: 10_000 });
    const remote = writeLock({ collection, locktimeout: 10_000 });
    const heldA = await local.acquire({ _id: a }); // an unrelated document, held in this process
    const delays: number[] = [];
    for (let round = 0; round < 3; round++) {
      const heldB = await remote.acquire({ _id: b });
      const waiter = local.acquire({ _id: b }, { wait: 5_000 });
      await sleep(200); // without the lock on a, the same loop acquires within ~100 ms of each release
      const freedAt = realNow();
      await heldB.release();
      const handle = await waiter;
      delays.push(Math.round(realNow() - freedAt));
      await handle.release();
    }
    await heldA.release();
    console.log(`      the waiter of b acquired ${delays.join(', ')} ms after b was released`);
    for (const delay of delays) expect(delay, 'one retry delay (at most 150 ms) and a round trip').to.be.below(400);
  });
});
