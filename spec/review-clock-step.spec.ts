/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): the `clock` option takes any "ms since the epoch" function (Date.now is the
 * obvious choice). When it steps backwards (an NTP step, a VM restored from a snapshot...),
 * ServerClock clamps the elapsed time to 0 (`Math.max(0, now - anchor.local)`), which freezes
 * the upper bound of the server's clock: the holder's view (handle.remaining(), the lease keeper)
 * then believes in a lease the server has already ended. A reply whose request left before the
 * step is ignored (`arrivedAt < sentAt`), so an extension in flight across the step does not
 * correct it either.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 1: the injected local clock steps backwards', () => {
  it('handle.remaining() reports 0 once another client holds the lock', async function () {
    this.timeout(10_000);
    const collection = await freshCollection([{ _id: 1 }]);
    let stepBack = 0;
    const lock = writeLock({ collection, locktimeout: 1_000, clock: () => realNow() - stepBack });
    const other = writeLock({ collection, locktimeout: 1_000 });
    const handle = await lock.acquire({ _id: 1 });
    stepBack = 5_000; // the local clock is set back 5 s
    const next = await other.acquire({ _id: 1 }, { wait: 3_000 });
    const left = handle.remaining();
    await next.release();
    expect(left, 'ms the first holder believes it still holds the lock, while another client holds it').to.equal(0);
  });

  it('using(): a step back while an extension is in flight aborts the body\'s signal before another client takes the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    let stepBack = 0;
    // The holder's extension replies take 100 ms to come back, its explaining reads 300 ms.
    const slow = delayedCollection(collection, {
      reply: (method, n) => (method === 'findOneAndUpdate' && n >= 2 ? 100 : method === 'aggregate' ? 300 : 0),
    });
    const lock = writeLock({ collection: slow, locktimeout: 2_000, clock: () => realNow() - stepBack });
    const other = writeLock({ collection, locktimeout: 2_000 });
    let abortedAt = 0;
    const start = realNow();
    const holding = lock.using({ _id: 1 }, undefined, async (_handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 6_000);
      });
    });
    // The keeper extends at about 1,000 ms; its reply arrives about 100 ms later. Step back meanwhile.
    setTimeout(() => (stepBack = 10_000), 1_050);
    await sleep(100);
    const next = await other.acquire({ _id: 1 }, { wait: 8_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    expect(abortedAt, 'the body\'s signal aborted').to.be.greaterThan(0);
    expect(
      abortedAt,
      `another client acquired at +${Math.round(acquiredAt - start)} ms; the body's signal aborted at +${Math.round(abortedAt - start)} ms`,
    ).to.be.below(acquiredAt);
  });
});
