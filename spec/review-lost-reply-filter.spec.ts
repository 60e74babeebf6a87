/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): a lock whose reply was lost is released (by the library, and by the caller
 * through err.lock) with the caller's acquisition filter, not the document's `{ _id }`. When the
 * filter no longer matches the locked document (it names the lock field, or a field that the
 * application changes), neither release can find it: the lock stays until its lease ends.
 */
import { expect } from 'chai';
import { isLockError, writeLock, type LockHandle } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from './support/fixture';

describe('review 1: releasing a lock whose reply was lost', () => {
  it('with a filter that names the lock field ({ lock: { $exists: false } }): the background release and err.lock.release() both find the document by the lock id', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    // The server executes the lock at once; its reply comes back after the call's 200 ms timeout.
    const slow = writeLock({ collection: delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 500 : 0) }), timeout: 200, locktimeout: 10_000 });
    const error = await rejectionOf(slow.acquire({ _id: 1, lock: { $exists: false } }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    const own = await (error.lock as LockHandle).release().then(() => 'released', (e: Error & { subtype?: string }) => e.subtype);
    await sleep(700);
    const other = await writeLock({ collection }).acquire({ _id: 1 }).then((h) => h.release().then(() => 'acquired'), (e: Error & { subtype?: string }) => e.subtype);
    expect({ own, other }, 'the caller was told the lock may have been written and to release err.lock').to.deep.equal({ own: 'released', other: 'acquired' });
  });
});
