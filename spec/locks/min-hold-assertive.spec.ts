/**
 * minHold on an assertive tag (a multiLock writer that asserts over readers): such a call may only
 * register (AssertiveLock, err.lock: a registration, never a hold), and a caller that gives the
 * registration back never ran under it. Its minimum hold refused every other writer for its whole
 * length (review of 75cff56), so it is refused before anything is written.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock } from '../../lib';
import { freshCollection, rejectionOf, snapshotOf } from '../support/fixture';

const readWrite = (collection: Collection<Document>) =>
  multiLock({
    collection,
    locktimeouts: { read: 20_000, write: 20_000 },
    lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
  });

describe('minHold on a tag assertive over others', function () {
  this.timeout(30_000);

  it('is refused with a TypeError before anything is written (a registration given back would refuse everyone for its minimum hold); the tags it asserts over take one', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const rw = readWrite(collection);
    const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
    const before = await snapshotOf(collection);
    const refused = await rejectionOf(rw.acquire({ _id: 1 }, { tag: 'write', minHold: 10_000 }));
    expect(refused).to.be.instanceOf(TypeError);
    expect(refused.message).to.match(/assertive/);
    expect(await snapshotOf(collection)).to.equal(before);
    await reader.release();
    const read = await rw.acquire({ _id: 1 }, { tag: 'read', minHold: 1_000 });
    expect(read.minHoldUntil).to.be.a('number');
    await read.release();
  });
});
