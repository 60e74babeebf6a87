/**
 * Review 2 of ceca4ec/fd551eb: a lock whose reply was lost is released once `clock.lower()`
 * passes `landsBy` (stamp + tolerance). Before this client has seen any reply carrying the
 * server's time (its first call, or after a backward step of its local clock), `lower()` is the
 * local clock: a guess, not a bound. When the client's clock is ahead of the server's (ordinary
 * skew between two machines), the stamp is ahead of `$$NOW`; a request that reaches the server
 * late (once the server's clock has caught up with the stamp) is accepted, while the background
 * release, judged by the local guess, ran at once and matched nothing. Nobody releases the lock.
 */
import { expect } from 'chai';
import { isLockError, resourceLocks, writeLock } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();
/** This client's clock runs 1 s ahead of the server's (two machines, no NTP agreement to the ms). */
const SKEW = 1_000;

describe('review 2: a lost reply on a client that has not read the server clock yet, whose clock is ahead', () => {
  it('resourceLocks without ttl: xlock fails with DbError, and the late write is released once it can no longer land', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    // The lock's first findOneAndUpdate reaches the server 1,100 ms late (a stalled connection),
    // when the server's clock is 100 ms past the stamp: within the 200 ms tight tolerance.
    const slow = resourceLocks({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? SKEW + 100 : 0) }),
      timeout: 300,
      clock: () => realNow() + SKEW,
    });
    const error = await rejectionOf(slow.xlock('r', 'gave-up'));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(2_000); // the late write has landed; any background release has run
    const held = await resourceLocks({ collection }).status({ resource: 'r' });
    expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'the failed caller holds nothing').to.deep.equal([]);
  });

  it('writeLock: acquire fails with DbError, and the document is free afterwards', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const slow = writeLock({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? SKEW + 100 : 0) }),
      timeout: 300,
      locktimeout: 60_000,
      clock: () => realNow() + SKEW,
    });
    const error = await rejectionOf(slow.acquire({ _id: 1 }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(2_000);
    const outcome = await writeLock({ collection, locktimeout: 60_000 })
      .acquire({ _id: 1 })
      .then((h) => h.release().then(() => 'acquired'), (e: Error & { subtype?: string }) => e.subtype);
    expect(outcome, 'the document is free again (the failed caller holds nothing)').to.equal('acquired');
  });

  it('control (passes): the same skew and the same late request, once the client has read the server clock, is released', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const slow = writeLock({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 3 ? SKEW + 100 : 0) }),
      timeout: 300,
      locktimeout: 60_000,
      clock: () => realNow() + SKEW,
    });
    await (await slow.acquire({ _id: 1 })).release(); // refused once for its stamp, then synchronized (calls 1 and 2)
    const error = await rejectionOf(slow.acquire({ _id: 1 }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(2_000);
    const outcome = await writeLock({ collection, locktimeout: 60_000 })
      .acquire({ _id: 1 })
      .then((h) => h.release().then(() => 'acquired'), (e: Error & { subtype?: string }) => e.subtype);
    expect(outcome).to.equal('acquired');
  });
});
