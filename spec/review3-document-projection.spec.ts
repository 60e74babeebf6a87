/**
 * Review 3: `acquire(filter, { document })` with a projection that excludes `_id` (`{ _id: 0 }`,
 * `{ _id: 0, balance: 1 }`; expectDocumentOption only protects the lock field). Store.projection
 * passes it to findOneAndUpdate as is, so the reply has no `_id`, and LockEngine.acquire builds
 * the handle's target from it: `{ _id: doc._id }` = `{ _id: undefined }` (sent as `_id: null`).
 * The handle then addresses no document: its release is `RessourceNotFound` (which `using()`
 * ignores), its commit fails, and the lock stays held until its lease ends.
 */
import { expect } from 'chai';
import { commit, writeLock } from '../lib';
import { freshCollection } from './support/fixture';

async function stateAfter(lock: ReturnType<typeof writeLock>, id: number): Promise<string> {
  return lock.acquire({ _id: id }).then(
    async (handle) => {
      await handle.release();
      return 'free';
    },
    (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
  );
}

describe('review 3 (fixed): a document projection without _id', () => {
  it('handle.release() releases a lock acquired with document: { _id: 0, balance: 1 }', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const handle = await accounts.acquire({ _id: 1 }, { document: { _id: 0, balance: 1 } });
    expect(handle.document).to.deep.equal({ balance: 100 });
    const released = await handle.release().then(
      () => 'released',
      (error: Error) => error.message,
    );
    expect(released).to.equal('released');
    expect(await stateAfter(accounts, 1)).to.equal('free');
  });

  it('using() with document: { _id: 0 } releases the lock when it settles', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const result = await accounts.using({ _id: 1 }, { document: { _id: 0 } }, (lock) => lock.document?.balance as number);
    expect(result).to.equal(100);
    expect(await stateAfter(accounts, 1), 'the lock after using() resolved').to.equal('free');
  });

  it('using() with document: { _id: 0 } applies its commit', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await accounts
      .using({ _id: 1 }, { document: { _id: 0, balance: 1 } }, (lock) => commit({ $set: { balance: (lock.document?.balance as number) - 30 } }, 'committed'))
      .catch((error: Error) => `rejected: ${error.message}`);
    const doc = await collection.findOne({ _id: 1 as never });
    expect({ outcome, balance: doc?.balance }).to.deep.equal({ outcome: 'committed', balance: 70 });
  });

  it('a projection without _id is either refused up front or works (not a handle on { _id: null })', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await accounts.acquire({ _id: 1 }, { document: { _id: 0 } }).then(
      async (handle) => {
        const guarded = await collection.countDocuments(handle.guard());
        await handle.release().catch(() => undefined);
        return guarded === 1 ? 'works' : `handle.guard() matches ${guarded} documents while the lock is held`;
      },
      (error: Error) => (error.name === 'TypeError' ? 'refused up front' : error.message),
    );
    expect(['works', 'refused up front']).to.include(outcome);
  });
});
