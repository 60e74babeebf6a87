/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): ServerClock.observe() resets its bounds when a reply contradicts them ("the
 * server's clock was stepped, or another primary with another clock took over"), but
 * `reachedMs` (lastReached) is a running maximum that is never reset. release() prunes entries
 * with `exp <= lastReached()` as "expired by a time the server has reached", so after a failover
 * to a primary whose clock is behind the old one's, a client's release removes other holders'
 * live entries.
 *
 * The failover is simulated: the first client's acquire reply carries a server time 5 s ahead of
 * the (single) test server, as a reply from an old primary with a fast clock would.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock } from '../lib';
import { freshCollection } from './support/fixture';

/** The collection as seen through an old primary whose clock ran `aheadMs` fast, for the first `calls` findOneAndUpdate replies. */
function oldPrimaryAhead(collection: Collection<Document>, aheadMs: number, calls: number): Collection<Document> {
  let seen = 0;
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property !== 'findOneAndUpdate') return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const result = (await (value as (...a: unknown[]) => Promise<Document | null>).apply(target, args)) as Document | null;
        if (++seen <= calls && result?.lock?.now instanceof Date) result.lock.now = new Date(result.lock.now.getTime() + aheadMs);
        return result;
      };
    },
  });
}

describe('review 1: a release never prunes by a time the server did not check', () => {
  it('after a failover to a primary 5 s behind, a release leaves another reader\'s live entry, and a writer is refused', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const options = {
      locktimeouts: { read: 3_000, write: 3_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } },
    };
    const c1 = multiLock({ collection: oldPrimaryAhead(collection, 5_000, 1), ...options });
    const c2 = multiLock({ collection, ...options });
    const c3 = multiLock({ collection, ...options });
    const mine = await c1.acquire({ _id: 1 }, { tag: 'read', locktimeout: 20_000 }); // on the old primary
    // failover: from now on every reply comes from the new primary (the test server)
    const reader = await c2.acquire({ _id: 1 }, { tag: 'read' });
    await mine.release();
    const writer = await c3.acquire({ _id: 1 }, { tag: 'write' }).then(() => `acquired while the reader has ${reader.remaining()} ms left`, (e: Error & { subtype?: string }) => e.subtype);
    expect(writer, 'a writer next to a live reader').to.equal('CooperativeLock');
  });
});
