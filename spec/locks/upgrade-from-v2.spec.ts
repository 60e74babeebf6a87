/**
 * Upgrading from monglock v2: the helper that clears v2's lock fields (and only those), and the
 * tag names that would collide with the stored layout.
 */
import { expect } from 'chai';
import { ObjectId, type Document } from 'mongodb';
import { clearV2Locks, isLockError, multiLock, writeLock } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

const byId = (id: number): Document => ({ _id: id });
const rw = { locktimeouts: { read: 5_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } } };

describe('upgrading from monglock v2', () => {
  it('clears a v2 writeLock and keeps the data; monglock 3 then locks the document', async () => {
    const collection = await freshCollection([{ _id: 1, total: 7, lock: { active: true, timestamp: Date.now() } }]);
    const cleared = await clearV2Locks(collection);
    expect(cleared).to.deep.equal({ writeLocks: 1, tags: {} });
    const stored = await collection.findOne(byId(1));
    expect(stored).to.deep.equal({ _id: 1, total: 7, lock: {} });
    const handle = await writeLock({ collection }).acquire({ _id: 1 });
    expect(handle.fence).to.equal(1);
    expect((await clearV2Locks(collection)).writeLocks).to.equal(0);
  });

  it('v2 tag arrays named like monglock 3 fields make every acquisition fail until they are cleared', async () => {
    const v2Entry = { timestamp: Date.now(), id: new ObjectId() };
    const collection = await freshCollection([{ _id: 1, lock: { fence: [v2Entry], read: [], write: [v2Entry] } }]);
    const lock = multiLock({ collection, ...rw });
    const refused = await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'read' }));
    expect(isLockError(refused, 'DbError'), String(refused)).to.equal(true);

    const cleared = await clearV2Locks(collection, { tags: ['fence', 'read', 'write'] });
    expect(cleared).to.deep.equal({ writeLocks: 0, tags: { fence: 1, read: 1, write: 1 } });
    const handle = await lock.acquire({ _id: 1 }, { tag: 'read' });
    expect(handle.tag).to.equal('read');
  });

  it('never touches monglock 3 fields: a held lock stays held', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = multiLock({ collection, ...rw });
    const held = await lock.acquire({ _id: 1 }, { tag: 'write' });
    await collection.updateOne(byId(1), { $set: { 'lock.active': true, 'lock.timestamp': Date.now() } });
    // `queue`, `committed` and `tags` are monglock 3 arrays/objects, not v2 entries: left alone.
    const cleared = await clearV2Locks(collection, { tags: ['write', 'tags', 'queue', 'committed'] });
    expect(cleared.writeLocks).to.equal(1);
    expect(cleared.tags).to.deep.equal({ write: 0, tags: 0, queue: 0, committed: 0 });
    const refused = await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'read' }));
    expect(isLockError(refused, 'CooperativeLock'), String(refused)).to.equal(true);
    await held.release();
  });

  it('clears only the documents matching `filter`', async () => {
    const collection = await freshCollection([
      { _id: 1, lock: { active: true, timestamp: 1 } },
      { _id: 2, lock: { active: false, timestamp: 2 } },
    ]);
    expect((await clearV2Locks(collection, { filter: { _id: 2 } })).writeLocks).to.equal(1);
    expect((await collection.findOne(byId(1)))?.lock).to.deep.equal({ active: true, timestamp: 1 });
  });

  it('refuses bad arguments before writing anything', async () => {
    const collection = await freshCollection([{ _id: 1, lock: { active: true, timestamp: 1 } }]);
    for (const options of [{ tags: 'read' }, { tags: ['a.b'] }, { field: '' }, { filter: 'all' }, { w: 0 }, { tags: ['__proto__'] }]) {
      const error = await rejectionOf(clearV2Locks(collection, options as never));
      expect(error.name).to.be.oneOf(['TypeError', 'RangeError']);
    }
    await rejectionOf(clearV2Locks({} as never));
    expect((await collection.findOne(byId(1)))?.lock).to.deep.equal({ active: true, timestamp: 1 });
  });

  it('refuses tags named like the stored layout, naming the reason', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    for (const tag of ['fence', 'tags', 'queue', 'active', 'timestamp']) {
      expect(() => multiLock({ collection, locktimeouts: { [tag]: 1_000 } })).to.throw(TypeError, new RegExp(`Tag \`${tag}\` is reserved.*rename the tag`));
      expect(() => multiLock({ collection, locktimeout: 1_000, lockRelationships: { read: { cooperative: [tag] }, [tag]: {} } })).to.throw(TypeError, /is reserved/);
    }
  });
});
