import { expect } from 'chai';
import { isLockError, multiLock, writeLock, type LockData } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('security', () => {
  it('lock ids are 128 random bits: 32 hex digits, no repeats over 10,000, balanced bits', async function () {
    this.timeout(60_000);
    const collection = await freshCollection(Array.from({ length: 100 }, (_, i) => ({ _id: i })));
    const lock = multiLock({ collection, locktimeouts: { s: 60_000 } });
    const ids = new Set<string>();
    let ones = 0;
    for (let round = 0; round < 100; round++) {
      const handles = await Promise.all(Array.from({ length: 100 }, (_, i) => lock.acquire({ _id: i }, { tag: 's' })));
      for (const handle of handles) {
        expect(handle.id).to.match(/^[0-9a-f]{32}$/);
        ids.add(handle.id);
        for (const digit of handle.id) ones += [...parseInt(digit, 16).toString(2)].filter((bit) => bit === '1').length;
      }
      await Promise.all(handles.map((handle) => handle.release()));
    }
    expect(ids.size).to.equal(10_000);
    const bits = 10_000 * 128;
    expect(Math.abs(ones - bits / 2)).to.be.below(4 * Math.sqrt(bits / 4)); // within 4 sigma of fair coins
  });

  it('release, extend and guarded writes need the id: a wrong id, or a handle for another document, changes nothing', async () => {
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection });
    const one = await lock.acquire({ _id: 1 });
    const two = await lock.acquire({ _id: 2 });
    const guessed: LockData = { ...two.toJSON(), id: 'a'.repeat(32) };
    expect(isLockError(await rejectionOf(lock.release({ _id: 2 }, { lock: guessed })))).to.equal(true);
    expect(isLockError(await rejectionOf(lock.extend({ _id: 2 }, { lock: guessed })))).to.equal(true);
    expect((await rejectionOf(lock.release({ _id: 2 }, { lock: one }))).subtype).to.equal('LockNotFound');
    expect((await collection.updateOne(one.guard({ _id: 2 }), { $set: { x: 1 } })).matchedCount, "a guard never matches another document").to.equal(0);
    expect((await rejectionOf(lock.release({ _id: 2 }, { lock: { tag: 'write' } as never }))).name).to.equal('TypeError');
    expect((await rejectionOf(lock.acquire({ _id: 2 }))).subtype, 'document 2 is still held').to.equal('LockAlreadyTaken');
    expect(((await collection.findOne({ _id: 2 as never }))?.lock.tags.write as Array<{ id: string }>).map((e) => e.id)).to.deep.equal([two.id]);
  });

  it('a caller\'s filter cannot forge ownership or bypass the lock\'s own conditions', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const held = await lock.acquire({ _id: 1 });
    const forged: LockData = { ...held.toJSON(), id: 'b'.repeat(32) };
    const tricks = [
      { _id: 1, 'lock.tags.write.id': { $exists: true } },
      { _id: 1, $or: [{ 'lock.tags.write': { $size: 0 } }, { _id: 1 }] },
      { _id: 1, $expr: { $eq: [1, 1] } },
      { $and: [{ _id: 1 }, { 'lock.tags.write': { $elemMatch: { id: { $ne: 'x' } } } }] },
    ];
    for (const filter of tricks) {
      expect((await rejectionOf(lock.acquire(filter))).subtype, JSON.stringify(filter)).to.equal('LockAlreadyTaken');
      expect(isLockError(await rejectionOf(lock.release(filter, { lock: forged }))), JSON.stringify(filter)).to.equal(true);
      expect(isLockError(await rejectionOf(lock.extend(filter, { lock: forged }))), JSON.stringify(filter)).to.equal(true);
    }
    expect(((await collection.findOne({ _id: 1 as never }))?.lock.tags.write as Array<{ id: string }>).map((e) => e.id)).to.deep.equal([held.id]);
  });

  it('tag and field names cannot inject update paths, and no input pollutes a prototype', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    for (const name of ['$set', 'a.b', '__proto__', 'constructor', 'prototype', 'tags.$[]', '']) {
      expect(() => multiLock({ collection, locktimeouts: { [name]: 10 } }), name).to.throw(TypeError);
      expect(() => writeLock({ collection, field: name }), name).to.throw(TypeError);
    }
    const lock = writeLock({ collection });
    const hostile = JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": {"polluted": true}}}');
    // Such keys are unknown params: refused before anything is written, and nothing is polluted.
    expect((await rejectionOf(lock.acquire({ _id: 1 }, hostile))).message).to.match(/Unknown key `params.__proto__`/);
    await lock.acquire({ _id: 1 }).then((handle) => handle.release());
    await rejectionOf(lock.release({ _id: 1 }, { lock: hostile }));
    expect(({} as Record<string, unknown>).polluted).to.equal(undefined);
  });
});
