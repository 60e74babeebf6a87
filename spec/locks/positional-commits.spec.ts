/**
 * A commit's update may name array elements: `$[]`, `$[<identifier>]` with `arrayFilters`, and a
 * positional `$` whose element the caller's `match` selects. The lock's own conditions are all in
 * `$expr`, which matches no array element, so the positional `$` names the caller's.
 */
import { expect } from 'chai';
import { commit, writeLock } from '../../lib';
import { freshCollection, rejectionOf, snapshotOf } from '../support/fixture';

const ITEMS = [
  { sku: 'x', qty: 1 },
  { sku: 'y', qty: 2 },
];

describe('commits that update array elements', () => {
  it('a positional $ update, with match naming the element', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const value = await carts.using({ _id: 'cart' }, {}, () => commit({ $set: { 'items.$.qty': 9 } }, 'set', { match: { 'items.sku': 'y' } }));
    expect(value).to.equal('set');
    expect((await collection.findOne({ _id: 'cart' as never }))?.items).to.deep.equal([{ sku: 'x', qty: 1 }, { sku: 'y', qty: 9 }]);
  });

  it('$[<identifier>] with arrayFilters, and $[] (every element)', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    await carts.using({ _id: 'cart' }, {}, () => commit({ $inc: { 'items.$[big].qty': 10 } }, undefined, { arrayFilters: [{ 'big.qty': { $gte: 2 } }] }));
    await carts.using({ _id: 'cart' }, {}, () => commit({ $inc: { 'items.$[].qty': 1 } }));
    expect((await collection.findOne({ _id: 'cart' as never }))?.items).to.deep.equal([{ sku: 'x', qty: 2 }, { sku: 'y', qty: 13 }]);
  });

  it('handle.release and handle.extend take match and arrayFilters too', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const handle = await carts.acquire({ _id: 'cart' });
    await handle.extend(5_000, { update: { $set: { 'items.$[one].qty': 5 } }, arrayFilters: [{ 'one.sku': 'x' }] });
    await handle.release({ update: { $set: { 'items.$.qty': 6 } }, match: { 'items.sku': 'y' } });
    expect((await collection.findOne({ _id: 'cart' as never }))?.items).to.deep.equal([{ sku: 'x', qty: 5 }, { sku: 'y', qty: 6 }]);
  });

  it('a document that does not match: RessourceNotFound, nothing written, and the lock was still held (using() then releases it)', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const handle = await carts.acquire({ _id: 'cart' });
    const before = await snapshotOf(collection);
    const refused = await rejectionOf(handle.release({ update: { $set: { 'items.$.qty': 0 } }, match: { 'items.sku': 'z' } }));
    expect(refused.subtype).to.equal('RessourceNotFound');
    expect(refused.message).to.match(/does not match params\.match/);
    expect(await snapshotOf(collection), 'nothing written').to.equal(before);
    const extension = await rejectionOf(handle.extend(5_000, { update: { $set: { 'items.$.qty': 0 } }, match: { 'items.sku': 'z' } }));
    expect(extension.subtype).to.equal('RessourceNotFound');
    await handle.release(); // still held
    const viaUsing = await rejectionOf(carts.using({ _id: 'cart' }, {}, () => commit({ $set: { 'items.$.qty': 0 } }, 1, { match: { 'items.sku': 'z' } })));
    expect(viaUsing.subtype).to.equal('RessourceNotFound');
    await (await carts.acquire({ _id: 'cart' })).release(); // using() released it
  });

  it('bad options are refused before anything is written', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const handle = await carts.acquire({ _id: 'cart' });
    const before = await snapshotOf(collection);
    expect(() => commit({ $set: { a: 1 } }, 1, { matc: {} } as never)).to.throw(TypeError, /Unknown key `options.matc`. Did you mean `match`/);
    expect(() => commit({ $set: { a: 1 } }, 1, { arrayFilters: [] })).to.throw(TypeError, /non-empty array/);
    expect(() => commit({ $set: { a: 1 } }, 1, { arrayFilters: [{ 'mine.x': 1 }] })).to.throw(TypeError, /identifier `mine`/);
    const stray = await rejectionOf(handle.release({ match: { a: 1 } }));
    expect(stray).to.be.instanceOf(TypeError);
    expect(stray.message).to.match(/only with `params.update`/);
    expect(await snapshotOf(collection)).to.equal(before);
    await handle.release();
  });
});
