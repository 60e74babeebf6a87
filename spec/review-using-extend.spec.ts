/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): the lease keeper of using() plans its timers from the lease it last set
 * itself. When the body extends the handle (handle.extend() defaults to the tag's lease, not the
 * `locktimeout` using() was called with), the server's lease becomes shorter than the keeper's
 * plan; nothing tells the keeper, and the body's signal is not aborted when another client can
 * (and does) take the lock.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 1: using() whose body extends its own handle', () => {
  it('handle.extend() without an argument inside using({ locktimeout: 4000 }) of a lock whose default lease is 1000 ms: the keeper replans, no second holder while the signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const jobs = writeLock({ collection, locktimeout: 1_000 });
    const other = writeLock({ collection, locktimeout: 1_000 });
    let abortedAt = 0;
    let otherAcquiredAt = 0;
    const holding = jobs.using({ _id: 1 }, { locktimeout: 4_000 }, async (handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await handle.extend(); // "make sure we have a full lease before the long step"
      // the long step: runs until the signal tells it to stop (or 3 s)
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 3_000);
      });
    });
    let settledAt = 0;
    void holding.finally(() => (settledAt = realNow())).catch(() => undefined);
    await sleep(50);
    const next = await other.acquire({ _id: 1 }, { wait: 5_000 });
    otherAcquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    // Either the keeper kept the lock (the other client got it only once using() had released it),
    // or the body's signal aborted before the other client got it.
    if (abortedAt === 0) expect(settledAt, 'using() released before the other client acquired').to.be.at.most(otherAcquiredAt);
    else expect(abortedAt, `the signal aborted ${Math.round(abortedAt - otherAcquiredAt)} ms after another client acquired the lock`).to.be.below(otherAcquiredAt);
  });
});
