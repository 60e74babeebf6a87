/**
 * A client's stamps before it has seen the server's clock (its first call, or after a backward
 * step of its local clock) are guesses from its local clock: the server's check of each stamp in
 * the same update keeps them safe, a lost reply of a guessed acquisition is still released, and a
 * refusal of a guess is not taken for a holder.
 */
import { expect } from 'chai';
import { isLockError, resourceLocks, writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { commandsSentBy, freshCollection, rejectionOf, sleep } from '../support/fixture';
import { whatAnAcquisitionGets } from '../support/lock-commands';
import type { Collection } from 'mongodb';

/*
 * A lock whose reply was lost is released once `clock.lower()` passes `landsBy` (stamp +
 * tolerance). Before this client has seen any reply carrying the server's time (its first call, or
 * after a backward step of its local clock), `lower()` is the local clock: a guess, not a bound.
 * The defect guarded against: with the client's clock ahead of the server's (ordinary skew between
 * two machines), the stamp is ahead of `$$NOW`; a request that reached the server late (once the
 * server's clock had caught up with the stamp) was accepted, while the background release, judged
 * by the local guess, had run at once and matched nothing. Nobody released the lock.
 */

/** This client's clock runs 1 s ahead of the server's (two machines, no NTP agreement to the ms). */
const SKEW = 1_000;

describe('a lost reply on a client that has not read the server clock yet, whose clock is ahead', () => {
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
    const outcome = await whatAnAcquisitionGets(writeLock({ collection, locktimeout: 60_000 }), { _id: 1 });
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
    const outcome = await whatAnAcquisitionGets(writeLock({ collection, locktimeout: 60_000 }), { _id: 1 });
    expect(outcome).to.equal('acquired');
  });
});

/*
 * Before its first reply a client stamps with its local clock, a guess. A guess ahead of the
 * server's `$$NOW` is refused by the update; the read that explains the refusal comes later, when
 * the server's clock has passed the stamp, and finds neither a holder nor a stamp out of the window.
 * The defect guarded against: that refusal was reported as LockAlreadyTaken ("held when the update
 * ran") on a free document (once in a CI run: the monotonic clock Node stamps with ran a
 * millisecond ahead of the server's wall clock on the same machine).
 */
describe('a first call whose guessed stamp is a little ahead of the server clock', () => {
  /** The client's clock 40 ms ahead; the read that explains a refusal reaches the server 100 ms late. */
  const AHEAD = 40;
  const lateRead = (collection: Collection): Collection => delayedCollection(collection, { request: (method, n) => (method === 'aggregate' && n === 1 ? 100 : 0) });

  it('writeLock: acquires the free document (tried again on the clock the read gave)', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection: lateRead(collection), clock: () => realNow() + AHEAD });
    const handle = await lock.acquire({ _id: 1 });
    await handle.release();
  });

  it('resourceLocks: xlock on a new resource acquires', async () => {
    const collection = await freshCollection();
    const locks = resourceLocks({ collection: lateRead(collection), clock: () => realNow() + AHEAD });
    const held = await locks.xlock('invoice-run', 'job-42', { ttl: 30_000 });
    await held.release();
  });

  it('a document held by another client is refused LockAlreadyTaken at once: the read names its holder, so the guess is not tried again', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection }).acquire({ _id: 1 });
    const lock = writeLock({ collection: lateRead(collection), clock: () => realNow() + AHEAD, changeStreams: false });
    const refused = await commandsSentBy(() => lock.acquire({ _id: 1 }));
    expect(isLockError(refused.error, 'LockAlreadyTaken'), String(refused.error)).to.equal(true);
    expect(refused.commands, 'one attempt, one explaining read').to.deep.equal(['findAndModify', 'aggregate']);
    await holder.release();
  });
});
