/**
 * Rate limits: a semaphore's `limit: K` with `minHold: W` admits at most K permits whose
 * acquisition stamps (server time) lie within any W ms, across clients; W is stored with the limit
 * and another W (or none) is refused `LimitMismatch`, as another limit is.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { semaphore } from '../../lib';
import { freshCollection, newClient, rejectionOf, snapshotOf } from '../support/fixture';

describe('rate limit: a semaphore whose permits are taken with minHold', () => {
  it('clients calling as fast as they can are admitted at most K per W ms, by the acquisition stamps', async () => {
    const K = 3;
    const W = 400;
    const collection = await freshCollection([{ _id: 'api' }]);
    const clients = await Promise.all(Array.from({ length: 4 }, () => newClient()));
    const stamps: number[] = [];
    const deadline = performance.now() + 2_500;
    await Promise.all(
      clients.map(async (client) => {
        const limiter = semaphore({ collection: client.db(collection.dbName).collection(collection.collectionName), limit: K, locktimeout: 5_000 });
        while (performance.now() < deadline) {
          const permit = await limiter.acquire({ _id: 'api' }, { minHold: W, wait: 5_000 });
          stamps.push(permit.timestamp);
          await permit.release(); // the call was quick: its permit still counts until its stamp + W
        }
      }),
    );
    stamps.sort((a, b) => a - b);
    expect(stamps.length, 'calls made').to.be.greaterThan(K);
    for (let i = 0; i + K < stamps.length; i++) {
      expect(stamps[i + K]! - stamps[i]!, `permits ${i}..${i + K} within one window`).to.be.at.least(W);
    }
  });

  it('the window is stored with the limit; another window, or none, is refused LimitMismatch while permits count; the stored one is shown by inspect', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const limiter = semaphore({ collection, limit: 2, locktimeout: 10_000 });
    const permit = await limiter.acquire({ _id: 1 }, { minHold: 5_000 });
    await permit.release();
    const doc = await collection.findOne({ _id: 1 } as Document);
    expect(doc!.lock.limits).to.deep.equal({ permit: { limit: 2, window: 5_000 } });
    expect((await limiter.inspect({ _id: 1 })).permits.permit).to.deep.equal({ used: 1, limit: 2, window: 5_000 });
    const before = await snapshotOf(collection);
    const other = await rejectionOf(limiter.acquire({ _id: 1 }, { minHold: 1_000 }));
    expect(other.subtype).to.equal('LimitMismatch');
    expect(other.message).to.match(/limit 2 per 5000 ms, this lock's is 2 per 1000 ms/);
    const none = await rejectionOf(limiter.acquire({ _id: 1 }));
    expect(none.subtype).to.equal('LimitMismatch');
    expect(none.message).to.match(/limit 2 per 5000 ms, this lock's is 2:/);
    expect(await snapshotOf(collection), 'refused: nothing written').to.equal(before);
    const same = await limiter.acquire({ _id: 1 }, { minHold: 5_000 });
    expect((await rejectionOf(limiter.acquire({ _id: 1 }, { minHold: 5_000 }))).subtype, 'two permits counted in the window').to.equal('SemaphoreFull');
    await same.release();
  });

  it('a forced release of the document frees its window; a plain limit may then be stored again', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const limiter = semaphore({ collection, limit: 1, locktimeout: 10_000 });
    await (await limiter.acquire({ _id: 1 }, { minHold: 9_000 })).release();
    expect((await rejectionOf(limiter.acquire({ _id: 1 }, { minHold: 9_000 }))).subtype).to.equal('SemaphoreFull');
    await limiter.forceRelease({ _id: 1 });
    const plain = await limiter.acquire({ _id: 1 });
    expect((await collection.findOne({ _id: 1 } as Document))!.lock.limits).to.deep.equal({ permit: 1 });
    await plain.release();
  });

  it('a plain semaphore stores and sends what it did before: a number as its limit, no recent stamps', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 2 });
    await (await pool.acquire({ _id: 1 })).release();
    const lock = (await collection.findOne({ _id: 1 } as Document))!.lock;
    expect(lock.limits).to.deep.equal({ permit: 2 });
    expect(lock.recent).to.equal(undefined);
    expect(lock.tags.permit).to.deep.equal([]);
  });
});
