/**
 * Review 3: `holdWhile` (lib/scoped-hold.ts) ends a body that returned `commit(update, value)`
 * with `finish(result.update)`: it stops the lease keeper and sends ONE write that applies the
 * update and releases. When that write is refused for a reason that is not the lock (the
 * server refuses the caller's update: a duplicate key, `$inc` on a string, a schema validator, a
 * positional operator; or monglock's own validation throws a TypeError before sending), nothing
 * is released and nothing else tries: `using()` rejects and the lock stays held, with nobody
 * extending it, until its lease ends: for a resource lock without `ttl` (whose release refuses any
 * `update`), forever. A body that throws instead is released (finish() without the update).
 */
import { expect } from 'chai';
import { commit, resourceLocks, writeLock } from '../lib';
import { freshCollection, rejectionOf } from './support/fixture';

describe('review 3 (fixed): a commit that cannot be applied', () => {
  it('using(): an update the server refuses ($inc on a string) rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 'one hundred' }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(accounts.using({ _id: 1 }, { document: true }, () => commit({ $inc: { balance: -30 } }, 'done')));
    console.log(`      using() rejected: ${failed.message}`);
    const next = await accounts.acquire({ _id: 1 }).then(
      async (handle) => {
        await handle.release();
        return 'free';
      },
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
    );
    expect(next, 'the lock after using() settled').to.equal('free');
  });

  it('using(): a unique-index violation in the commit rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([
      { _id: 1, email: 'a@example.com' },
      { _id: 2, email: 'b@example.com' },
    ]);
    await collection.createIndex({ email: 1 }, { unique: true });
    const users = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(users.using({ _id: 1 }, undefined, () => commit({ $set: { email: 'b@example.com' } })));
    console.log(`      using() rejected: ${failed.message}`);
    const next = await users.acquire({ _id: 1 }).then(
      async (handle) => {
        await handle.release();
        return 'free';
      },
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
    );
    expect(next, 'the lock after using() settled').to.equal('free');
  });

  it('using(): a commit that monglock refuses (it touches the lock field) rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(accounts.using({ _id: 1 }, undefined, () => commit({ $set: { 'lock.note': 'x' } })));
    expect(failed.name).to.equal('TypeError');
    const next = await accounts.acquire({ _id: 1 }).then(
      async (handle) => {
        await handle.release();
        return 'free';
      },
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
    );
    expect(next, 'the lock after using() settled').to.equal('free');
  });

  it('resource locks: using() whose body returns commit() is refused and releases its lock without ttl', async function () {
    this.timeout(15_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const failed = await rejectionOf(locks.using('printer', 'job-1', {}, () => commit({ $set: { printed: true } }, 'ok')));
    console.log(`      using() rejected: ${failed.message}`);
    const status = await locks.status();
    expect(status, 'locks left after using() settled').to.deep.equal([]);
  });
});
