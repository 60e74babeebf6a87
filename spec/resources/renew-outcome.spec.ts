/**
 * `renew(lockId, ttl)` reports what it knows: `LockNotFound` only for a lock that is gone, and
 * `DbError` (an unknown outcome) for a renewal whose reply was lost, as a handle's `extend()` does.
 */
import { expect } from 'chai';
import { isLockError, resourceLocks } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, rejectionOf } from '../support/fixture';
import { isExtension, never } from '../support/lock-commands';

/** The calls' `timeout`: a lost reply misses it; every other command meets it even on a loaded 2-core machine. */
const DEADLINE = 2_000;

describe('renew() when a renewal\'s reply is lost', () => {
  it('the renewal landed and its reply was lost: DbError naming it (an unknown outcome), never LockNotFound; the lock is held with its new expiry', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const exclusive = await locks.xlock('r1', 'job', { ttl: 10_000 });
    const shared = await locks.slock('r2', 'job', { ttl: 10_000 });
    let lostOne = false;
    const lossy = delayedCollection(collection, {
      reply: (method, _n, args) => {
        if (lostOne || !isExtension(method, args)) return 0;
        lostOne = true;
        return never;
      },
    });

    const error = await rejectionOf(resourceLocks({ collection: lossy, timeout: DEADLINE }).renew('job', 60_000));
    expect(lostOne, 'one renewal\'s reply was lost').to.equal(true);
    expect(isLockError(error, 'LockNotFound'), `not reported as a lost lock: ${error.message}`).to.equal(false);
    expect(isLockError(error, 'DbError'), `reported as an unknown outcome: ${error.message}`).to.equal(true);
    expect(error.message, 'the message names the renewal whose outcome is unknown').to.match(/r[12] \((exclusive|shared)\)/);
    expect(error.message, 'the message says it may have landed').to.match(/may have been written/);
    expect((error.data as { unknown?: unknown } | undefined)?.unknown, 'err.data.unknown names it').to.have.length(1);

    const held = await locks.status({ lockId: 'job' });
    expect(held.map((status) => status.resource).sort(), 'both locks are still held').to.deep.equal(['r1', 'r2']);
    const oldest = Math.max(exclusive.expiresAt, shared.expiresAt);
    for (const status of held) {
      expect(status.expiresAt?.getTime(), `${status.resource} holds its new expiry (both renewals landed)`).to.be.greaterThan(oldest + 40_000);
    }
  });

  it('a handle\'s extend() with the same lost reply rejects DbError too', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const lossy = delayedCollection(collection, { reply: (method, _n, args) => (isExtension(method, args) ? never : 0) });
    const handle = await resourceLocks({ collection: lossy, timeout: DEADLINE }).xlock('r', 'job', { ttl: 10_000 });
    const error = await rejectionOf(handle.extend(60_000));
    expect(error.subtype, error.message).to.equal('DbError');
  });
});

describe('renew() with one lock gone and another of unknown outcome', () => {
  it('LockNotFound naming the lost lock in data.lost and the lost reply in data.unknown (the message says both); the unknown one is still held', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    await locks.xlock('r1', 'job', { ttl: 10_000 });
    await locks.xlock('r3', 'job', { ttl: 1_500 }); // long enough for renew's read to see it live on a loaded machine
    const idOf = (args: readonly unknown[]): unknown => (args[0] as { _id?: unknown } | undefined)?._id;
    const faulty = delayedCollection(collection, {
      // r3's extension reaches the server after its lease ended; r1's lands and its reply is lost.
      request: (method, _n, args) => (isExtension(method, args) && idOf(args) === 'r3' ? 2_000 : 0),
      reply: (method, _n, args) => (isExtension(method, args) && idOf(args) === 'r1' ? never : 0),
    });
    const error = await rejectionOf(resourceLocks({ collection: faulty, timeout: 2 * DEADLINE }).renew('job', 60_000));
    expect(isLockError(error, 'LockNotFound'), error.message).to.equal(true);
    expect(error.data, 'what was lost, and what may have been written').to.deep.include({ lost: ['r3 (exclusive)'], unknown: ['r1 (exclusive)'], failed: [] });
    expect(error.message).to.match(/lost locks while renewing: r3 \(exclusive\); and failed: r1 \(exclusive\): .*may have been written/);
    expect((await locks.status({ lockId: 'job' })).map((status) => status.resource), 'r1 is held (its renewal landed)').to.deep.equal(['r1']);
  });
});
