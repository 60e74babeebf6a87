/**
 * A commit by lock data passed back (`{ lock }` as JSON: a lock taken without minHold has no
 * `minHoldUntil` in it, so it is read as `holdUnknown`) with a positional `$` update whose element
 * the caller's `match` selects. positional-commits.spec.ts relies on the commit's lock conditions
 * being all in `$expr`, which matches no array element, so that the positional `$` names the
 * caller's element. Since 59c9e20 such a commit also sends an `$elemMatch` on the lock's tag array
 * (after the caller's `match`): the query then traverses two arrays, for which the manual calls the
 * positional `$` ambiguous (SERVER-14662: which array's index it takes is undefined; mongod records
 * the index of the last array a predicate traversed). mongo-java-server happens to update the right
 * element (first case passes here); the second case checks the property the documented guarantee
 * rests on, in the command sent: no lock array is queried outside `$expr`.
 * (Before the fix, the second case failed: the condition was an `$elemMatch` beside the caller's match.)
 */
import { expect } from 'chai';
import type { CommandStartedEvent, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { DB_NAME, freshCollection, newClient } from '../support/fixture';

const ITEMS = [
  { sku: 'x', qty: 1 },
  { sku: 'y', qty: 2 },
];

/** The dotted paths a query names outside `$expr` (where a predicate may traverse an array). */
function queriedPaths(query: unknown, into: string[] = []): string[] {
  if (Array.isArray(query)) query.forEach((part) => queriedPaths(part, into));
  else if (query !== null && typeof query === 'object') {
    for (const [key, value] of Object.entries(query as Document)) {
      if (key === '$expr') continue;
      if (!key.startsWith('$')) into.push(key);
      if (key === '$and' || key === '$or' || key === '$nor') queriedPaths(value, into);
    }
  }
  return into;
}

describe('positional commits by lock data passed back', () => {
  it('a commit by the JSON of a lock taken without minHold: items.$ names the element match selects (mongo-java-server)', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const handle = await carts.acquire({ _id: 'cart' });
    const data = JSON.parse(JSON.stringify(handle)) as Record<string, unknown>;
    await carts.release({ _id: 'cart' }, { lock: data as never, update: { $set: { 'items.$.qty': 6 } }, match: { 'items.sku': 'y' } });
    expect((await collection.findOne({ _id: 'cart' as never }))?.items).to.deep.equal([{ sku: 'x', qty: 1 }, { sku: 'y', qty: 6 }]);
  });

  it('the commit by JSON, as by a handle, queries no lock array outside $expr (the positional $ can only name the caller\'s element)', async () => {
    const named = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const client = await newClient({ monitorCommands: true });
    const sent: CommandStartedEvent[] = [];
    client.on('commandStarted', (event) => sent.push(event));
    const collection = client.db(DB_NAME).collection(named.collectionName);
    const carts = writeLock({ collection, locktimeout: 5_000 });
    const queriesOf = (): string[][] =>
      sent
        .flatMap((event): Document[] => (event.commandName === 'findAndModify' ? [{ q: event.command.query, u: event.command.update }] : event.commandName === 'update' ? (event.command.updates as Document[]) : []))
        .filter((write) => JSON.stringify(write.u ?? {}).includes('items.$'))
        .map((write) => queriedPaths(write.q));
    const byHandle = await carts.acquire({ _id: 'cart' });
    await carts.release({ _id: 'cart' }, { lock: byHandle, update: { $set: { 'items.$.qty': 5 } }, match: { 'items.sku': 'y' } });
    const byJson = await carts.acquire({ _id: 'cart' });
    const data = JSON.parse(JSON.stringify(byJson)) as Record<string, unknown>;
    await carts.release({ _id: 'cart' }, { lock: data as never, update: { $set: { 'items.$.qty': 6 } }, match: { 'items.sku': 'y' } });
    const [handleQuery, jsonQuery] = queriesOf();
    expect({ handleQuery, jsonQuery }).to.deep.equal({ handleQuery: ['_id', 'items.sku'], jsonQuery: ['_id', 'items.sku'] });
  });
});
