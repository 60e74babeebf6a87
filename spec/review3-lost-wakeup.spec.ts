/**
 * Review 3: LocalWaiters.released() wakes exactly one waiter of the document, the first by rank
 * (the longest waiting), whatever it waits for. When that waiter cannot use the release (it waits
 * for another tag, held elsewhere), it is refused and goes back to sleep, and the wake-up is not
 * passed on: the waiter the release did free sleeps on. Its sleep began while the document was
 * held here, so it lasts HELD_HERE_SLEEP (1 s), not a retry delay: it acquires up to a second
 * after the release that freed it, although README says a release in the same process "hands the
 * document to the first of that process's waiters at once, without polling".
 */
import { expect } from 'chai';
import { multiLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 3 (fixed): a local release wakes a waiter that cannot use it', () => {
  it('the waiter the release freed acquires promptly', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const options = {
      collection,
      locktimeouts: { x: 10_000, y: 10_000 },
      lockRelationships: { x: { cooperative: ['x'] }, y: { cooperative: ['y'] } }, // two independent mutexes
    };
    const local = multiLock(options);
    const remote = multiLock(options);
    const delays: number[] = [];
    for (let round = 0; round < 3; round++) {
      const remoteY = await remote.acquire({ _id: 'doc' }, { tag: 'y' }); // y is held by another process
      const localX = await local.acquire({ _id: 'doc' }, { tag: 'x' }); // x is held here
      const waitsForY = local.acquire({ _id: 'doc' }, { tag: 'y', wait: 5_000 }); // ranks first
      await sleep(30);
      const waitsForX = local.acquire({ _id: 'doc' }, { tag: 'x', wait: 5_000 });
      await sleep(400 + 150 * round); // both are asleep between attempts
      const freedAt = realNow();
      await localX.release(); // frees x: wakes the first waiter, the one waiting for y
      const handle = await waitsForX;
      delays.push(Math.round(realNow() - freedAt));
      await handle.release();
      await remoteY.release();
      await (await waitsForY).release();
    }
    console.log(`      the x waiter acquired ${delays.join(', ')} ms after the local release of x`);
    for (const delay of delays) expect(delay, 'ms from the local release to the acquisition').to.be.below(300);
  });
});
