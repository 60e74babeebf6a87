/**
 * minHold on an assertive tag (a multiLock writer that asserts over readers): a call without wait
 * that only registered (AssertiveLock, err.lock: a registration, never a hold) and whose caller
 * gives it back. Nobody ran under it, as under an abandoned acquisition's lock (removed, not kept:
 * docs/api.md); the caller's release keeps it instead, and the document stays refused for minHold.
 * FAILS on 75cff56: another writer is refused for the registration's minimum hold.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, multiLock } from '../../lib';
import { freshCollection } from '../support/fixture';

const readWrite = (collection: Collection<Document>) =>
  multiLock({
    collection,
    locktimeouts: { read: 20_000, write: 20_000 },
    lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
  });

describe('minHold on an assertive registration given back', function () {
  this.timeout(30_000);

  it('a registration (AssertiveLock) released by its caller, which never held the lock, leaves no minimum hold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const rw = readWrite(collection);
    const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
    const refused = await rw.acquire({ _id: 1 }, { tag: 'write', minHold: 10_000 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isLockError(refused, 'AssertiveLock')).to.equal(true);
    await (refused as { lock: { release(): Promise<void> } }).lock.release();
    await reader.release();
    const next = await rw.acquire({ _id: 1 }, { tag: 'write' }).then(
      async (handle) => (await handle.release(), 'acquired'),
      (error: { subtype?: string }) => `refused: ${error.subtype}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    expect(next, JSON.stringify(doc?.lock?.tags)).to.equal('acquired');
  });
});
