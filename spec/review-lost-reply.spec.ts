/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): a lock whose reply was lost (client-side deadline) is released at once,
 * while the request that writes it may still be on its way to the server. The release then
 * matches nothing, the write lands afterwards, and nobody releases it again.
 */
import { expect } from 'chai';
import { resourceLocks, writeLock, isLockError } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { MongoClient } from 'mongodb';
import { FaultProxy } from '../stress/fault-proxy';
import { freshCollection, mongoBackend, rejectionOf, sleep } from './support/fixture';

describe('review 1: a lost reply whose request is still in flight', () => {
  it('resourceLocks without ttl: xlock fails with DbError, and no lock is held afterwards (a late write is refused or released)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    // The lock's findOneAndUpdate reaches the server 600 ms late (a stalled connection); the
    // call's timeout is 200 ms. Everything else (the creating upsert, the release) is prompt.
    const slow = resourceLocks({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 600 : 0) }),
      timeout: 200,
    });
    const error = await rejectionOf(slow.xlock('r', 'gave-up'));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(1_500);
    const other = resourceLocks({ collection });
    const held = await other.status({ resource: 'r' });
    // The caller was told its call failed and the library "released what it wrote": nothing may be held.
    expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'a lock nobody holds, with no expiry').to.deep.equal([]);
  });

  it('writeLock: acquire fails with DbError, and the document is free afterwards', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const slow = writeLock({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 600 : 0) }),
      timeout: 200,
      locktimeout: 10_000,
    });
    const error = await rejectionOf(slow.acquire({ _id: 1 }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(1_000);
    const other = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await other.acquire({ _id: 1 }).then((h) => h.release().then(() => 'acquired'), (e: Error & { subtype?: string }) => e.subtype);
    expect(outcome, 'the document is free again (the failed caller holds nothing)').to.equal('acquired');
  });
});

describe('review 1: the same over a real TCP connection (fault proxy: a latency spike on one request)', () => {
  it('resourceLocks without ttl, a client that already knows the server clock: a 90 ms spike against a 40 ms timeout leaves nothing held', async function () {
    this.timeout(20_000);
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    const proxy = new FaultProxy(hostname, Number(port));
    await proxy.start();
    const client = new MongoClient(proxy.uri(), { maxPoolSize: 4 });
    try {
      await client.connect();
      await Promise.all(Array.from({ length: 4 }, () => client.db('admin').command({ ping: 1 })));
      const collection = await freshCollection();
      const viaProxy = client.db(collection.dbName).collection(collection.collectionName);
      const locks = resourceLocks({ collection: viaProxy });
      for (let i = 0; i < 5; i++) await (await locks.xlock('r', 'first')).release(); // synchronized, 'r' known
      proxy.set({ kind: 'latency', ms: 90 });
      const pending = locks.xlock('r', 'gave-up', { timeout: 40 });
      await sleep(20);
      proxy.set({ kind: 'none' }); // the spike is over: the release that follows the deadline goes straight through
      const error = await rejectionOf(pending);
      expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
      await sleep(500);
      const held = await resourceLocks({ collection }).status({ resource: 'r' });
      expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'the failed caller holds nothing').to.deep.equal([]);
    } finally {
      await client.close(true).catch(() => undefined);
      await proxy.stop();
    }
  });
});
