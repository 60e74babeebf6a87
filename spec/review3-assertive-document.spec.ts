/**
 * Review 3: `document` with an assertive tag. When the first attempt registers (the tags it
 * asserts over are held) and the wait goes on with continuations (LockEngine.resume), the lock
 * that finally resolves carries no document: resume() never asks for it, and the AssertivePending's
 * document (read while the other holder still held the lock, so stale) is dropped. A folded
 * section on an assertive tag (the writer of a read/write lock, README "Relationships") gets
 * `handle.document === undefined` whenever it had to wait for readers.
 */
import { expect } from 'chai';
import { multiLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

describe('review 3 (fixed): document with an assertive tag that had to wait', () => {
  it('the handle that resolves carries the document as it is once the lock is effective', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 5_000, write: 5_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
    const writer = rw.acquire({ _id: 1 }, { tag: 'write', wait: 3_000, document: { balance: 1 } });
    await sleep(300);
    await collection.updateOne({ _id: 1 as never }, { $set: { balance: 90 } }); // a change made before the writer's lock is effective
    await reader.release();
    const handle = await writer;
    const document = handle.document;
    await handle.release();
    expect(document).to.deep.equal({ _id: 1, balance: 90 });
  });
});
