/**
 * minHold is judged by the server's clock (the stored `hold`), never a client's: a release whose
 * client's clock stepped forward (or whose bounds on the server's clock are ahead of it: a failover
 * to a primary whose clock is behind) must not end the minimum hold early.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';
import { realNow } from '../support/clock';

describe('minHold and a client clock that steps forward', () => {
  it('a release after the client\'s clock stepped 30 s forward keeps the entry until the stored hold: the job does not run again within minHold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    let step = 0;
    const stepping = writeLock({ collection, locktimeout: 60_000, clock: () => realNow() + step });
    const held = await stepping.acquire({ _id: 1 }, { minHold: 5_000 });
    step = 30_000; // the client's clock steps forward (its bounds on the server's clock now run 30 s ahead)
    await held.release().catch(() => undefined);
    const other = writeLock({ collection, locktimeout: 60_000 });
    const second = await other.acquire({ _id: 1 }).then(
      async (handle) => (await handle.release(), `acquired, stamped ${handle.timestamp - held.timestamp} ms after the first`),
      (error: { subtype?: string }) => `refused: ${error.subtype}`,
    );
    expect(second).to.equal('refused: LockAlreadyTaken');
  });
});
