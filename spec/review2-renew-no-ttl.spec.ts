/**
 * Review 2 of ceca4ec: `renew(lockId, ttl)` tells the handles kept by using() their new expiry
 * (LockHandle.updateExpiry), so that their lease keeper replans. A using() without `ttl` has no
 * keeper at all (holdWhile: `leaseMs` Infinity), so nothing listens: a renew of its group turns
 * its lock into a lease of `ttl` ms that nobody extends, and the body's signal never aborts
 * when the lease ends and another client takes the resource.
 */
import { expect } from 'chai';
import { resourceLocks } from '../lib';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 2: renew() of a group whose lock is held by using() without ttl', () => {
  it('the renewed lease is kept from then on: no other client takes it while the body\'s signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const other = resourceLocks({ collection });
    let abortedAt = 0;
    let bodyEndedAt = 0;
    const holding = locks.using('r', 'job-42', {}, async (_handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await locks.renew('job-42', 1_000); // e.g. a heartbeat that renews every lock of the job
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 3_000);
      });
      bodyEndedAt = realNow();
    });
    await sleep(100);
    const next = await other.xlock('r', 'someone-else', { wait: 5_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    const stoppedAt = abortedAt > 0 ? abortedAt : bodyEndedAt;
    expect(
      stoppedAt,
      `another client acquired; the body ${abortedAt > 0 ? 'was aborted' : 'was never aborted and ended'} ${Math.round(stoppedAt - acquiredAt)} ms later`,
    ).to.be.below(acquiredAt);
  });
});
