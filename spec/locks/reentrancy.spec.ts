/**
 * Reentrancy keyed by an owner: while an owner holds a lock (live by the server's clock), its
 * next acquisition is a nested hold with the same fencing token; every hold is released on its
 * own, and the lock is free only when the last is.
 */
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { MAX_HOLDS, multiLock, semaphore, withOwner, writeLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { failureOf, freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { whatAnAcquisitionGets } from '../support/lock-commands';

/** The stored entries of `tag` in document `_id`. */
async function entries(collection: Collection<Document>, _id: unknown, tag = 'write'): Promise<Array<{ id: string; exp: Date; owner?: string; fence?: number }>> {
  return ((await collection.findOne({ _id: _id as never }))?.lock?.tags?.[tag] ?? []) as Array<{ id: string; exp: Date; owner?: string; fence?: number }>;
}

describe('reentrancy by owner', () => {
  it('writeLock: the owner re-enters at once with the same fencing token; others are refused until its last hold is released', async () => {
    const collection = await freshCollection([{ _id: 'cart' }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const outer = await lock.acquire({ _id: 'cart' }, { owner: 'req-1' });
    const inner = await lock.acquire({ _id: 'cart' }, { owner: 'req-1' });
    expect(inner.id).to.not.equal(outer.id);
    expect(inner.fence, 'same token').to.equal(outer.fence);
    expect([outer.owner, inner.owner]).to.deep.equal(['req-1', 'req-1']);
    expect(await whatAnAcquisitionGets(lock, { _id: 'cart' })).to.equal('LockAlreadyTaken');
    expect((await rejectionOf(lock.acquire({ _id: 'cart' }, { owner: 'req-2' }))).subtype).to.equal('LockAlreadyTaken');

    await inner.release();
    expect((await rejectionOf(inner.release())).subtype, 'a hold is released once').to.equal('LockNotFound');
    expect((await rejectionOf(lock.acquire({ _id: 'cart' }, { owner: 'req-2' }))).subtype, 'the outer hold still holds').to.equal('LockAlreadyTaken');
    await outer.release();
    const next = await lock.acquire({ _id: 'cart' }, { owner: 'req-2' });
    expect(next.fence).to.be.greaterThan(outer.fence);
    await next.release();
  });

  it('releasing the outer hold first leaves the inner one holding (each hold counts)', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const outer = await lock.acquire({ _id: 1 }, { owner: 'job' });
    const inner = await lock.acquire({ _id: 1 }, { owner: 'job' });
    await outer.release();
    expect(await whatAnAcquisitionGets(lock, { _id: 1 })).to.equal('LockAlreadyTaken');
    const seen = await lock.inspect({ _id: 1 });
    expect(seen.locks.map((held) => [held.id, held.owner, held.fence])).to.deep.equal([[inner.id, 'job', outer.fence]]);
    await inner.release();
    expect(await whatAnAcquisitionGets(lock, { _id: 1 })).to.equal('acquired');
  });

  it('a nested hold extends nothing: the outer hold keeps its expiry, and the nested one has its own lease', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const outer = await lock.acquire({ _id: 1 }, { owner: 'o', locktimeout: 30_000 });
    const before = (await entries(collection, 1)).find((entry) => entry.id === outer.id)!.exp.getTime();
    const inner = await lock.acquire({ _id: 1 }, { owner: 'o', locktimeout: 5_000 });
    const stored = await entries(collection, 1);
    expect(stored.find((entry) => entry.id === outer.id)!.exp.getTime()).to.equal(before);
    expect(stored.find((entry) => entry.id === inner.id)!.exp.getTime()).to.equal(inner.expiresAt);
    expect(inner.expiresAt).to.be.lessThan(outer.expiresAt);
    expect(stored.map((entry) => entry.fence)).to.deep.equal([outer.fence, outer.fence]);
    await inner.release();
    await outer.release();
  });

  it('once the owner\'s holds have expired, its next acquisition is a new lock with a new token', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 300 });
    const first = await lock.acquire({ _id: 1 }, { owner: 'o' });
    await sleep(600);
    const second = await lock.acquire({ _id: 1 }, { owner: 'o' });
    expect(second.fence).to.be.greaterThan(first.fence);
    expect((await rejectionOf(first.release())).subtype).to.be.oneOf(['LockNotFound', 'LockWasReacquired']);
    await second.release();
  });

  it(`at most ${MAX_HOLDS} nested holds: the next is refused TooManyHolds (409), nothing written`, async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const holds: LockHandle[] = [];
    for (let i = 0; i < MAX_HOLDS; i++) holds.push(await lock.acquire({ _id: 1 }, { owner: 'loop' }));
    const refused = await rejectionOf(lock.acquire({ _id: 1 }, { owner: 'loop', boom: Boom }));
    expect(refused.subtype).to.equal('TooManyHolds');
    expect((refused as unknown as Boom.Boom).output.statusCode).to.equal(409);
    expect(await entries(collection, 1)).to.have.length(MAX_HOLDS);
    await Promise.all(holds.map((hold) => hold.release()));
    expect(await entries(collection, 1)).to.have.length(0);
  });

  it('withOwner: nested using() calls of one request re-enter; another request waits for both', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'order' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const events: string[] = [];
    const request = (name: string, delay: number) =>
      withOwner(name, async () => {
        await sleep(delay);
        await lock.using({ _id: 'order' }, { wait: 20_000 }, async (outer) => {
          events.push(`${name} in`);
          await sleep(100);
          // A helper that locks the same order: it re-enters instead of waiting for its own caller.
          await lock.using({ _id: 'order' }, { wait: 20_000 }, async (inner) => {
            expect(inner.fence).to.equal(outer.fence);
            events.push(`${name} nested`);
            await sleep(50);
          });
          events.push(`${name} out`);
        });
      });
    await Promise.all([request('a', 0), request('b', 30)]);
    expect(events).to.deep.equal(['a in', 'a nested', 'a out', 'b in', 'b nested', 'b out']);
    expect(() => withOwner('', () => undefined)).to.throw(TypeError, /owner id/);
  });

  it('an owner id is shared: two processes\' locks (two clients) with one owner share the lock', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const other = await newClient();
    const here = writeLock({ collection, locktimeout: 60_000 });
    const there = writeLock({ collection: other.db(collection.dbName).collection(collection.collectionName), locktimeout: 60_000 });
    const a = await here.acquire({ _id: 1 }, { owner: 'tenant-7' });
    const b = await there.acquire({ _id: 1 }, { owner: 'tenant-7' });
    expect(b.fence).to.equal(a.fence);
    await a.release();
    await b.release();
  });

  it('multiLock: re-entry is per tag; a registration still waiting for readers is no hold to nest in', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 60_000, write: 60_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read', owner: 'r' });
    const nestedRead = await rw.acquire({ _id: 'doc' }, { tag: 'read', owner: 'r' });
    expect(nestedRead.fence).to.equal(reader.fence);
    const registered = (await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'write', owner: 'w' }))).lock as LockHandle;
    expect(registered.owner).to.equal('w');
    const nested = await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'write', owner: 'w' }));
    expect(nested.subtype).to.equal('CooperativeLock');
    expect(nested.message).to.match(/waits for tag read/);
    await Promise.all([reader.release(), nestedRead.release()]);
    const writer = await rw.acquire({ _id: 'doc' }, { lock: registered });
    const inner = await rw.acquire({ _id: 'doc' }, { tag: 'write', owner: 'w' });
    expect(inner.fence).to.equal(writer.fence);
    await inner.release();
    await writer.release();
  });

  it('bad owners are refused before anything is written; a semaphore takes none', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    expect(await failureOf(() => lock.acquire({ _id: 1 }, { owner: 7 as never }))).to.be.instanceOf(TypeError);
    expect(await failureOf(() => lock.acquire({ _id: 1 }, { owner: 'x'.repeat(257) }))).to.be.instanceOf(TypeError);
    expect((await failureOf(() => lock.acquire({ _id: 1 }, { ownr: 'a' } as never))).message).to.match(/ownr.*owner/);
    const pool = semaphore({ collection, limit: 2 });
    expect((await failureOf(() => pool.acquire({ _id: 1 }, { owner: 'a' } as never))).message).to.match(/counted by permits, not owned/);
    expect(await entries(collection, 1)).to.deep.equal([]);
    expect(await entries(collection, 1, 'permit')).to.deep.equal([]);
    // Within withOwner, a semaphore's acquisitions stay plain holders.
    const held = await withOwner('ctx', () => pool.acquire({ _id: 1 }));
    expect(held.owner).to.equal(undefined);
    await held.release();
  });

  it('many clients and owners at once: holders of different owners never overlap; every nested hold keeps its owner\'s token', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const clients = await Promise.all(Array.from({ length: 3 }, () => newClient()));
    const intervals: Array<{ owner: string; fence: number; start: number; end: number }> = [];
    await Promise.all(
      clients.flatMap((client, c) => {
        const lock = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: 20_000 });
        return Array.from({ length: 4 }, async (_, worker) => {
          // Two workers of each client share an owner: they re-enter each other's lock.
          const owner = `owner-${c}-${worker % 2}`;
          for (let round = 0; round < 4; round++) {
            const outer = await lock.acquire({ _id: 'hot' }, { owner, wait: 50_000 });
            const start = Date.now();
            const inner = await lock.acquire({ _id: 'hot' }, { owner, wait: 50_000 });
            expect(inner.fence).to.equal(outer.fence);
            await sleep(3);
            await inner.release();
            const end = Date.now();
            await outer.release();
            intervals.push({ owner, fence: outer.fence, start, end });
          }
        });
      }),
    );
    expect(intervals).to.have.length(48);
    const sorted = intervals.sort((x, y) => x.start - y.start);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        if (sorted[j]!.owner !== sorted[i]!.owner) expect(sorted[j]!.start >= sorted[i]!.end, `${sorted[i]!.owner} and ${sorted[j]!.owner} overlap`).to.equal(true);
      }
    }
    expect(await entries(collection, 'hot')).to.satisfy((left: Array<{ exp: Date }>) => left.every((entry) => entry.exp.getTime() <= Date.now()));
  });

  it('a nested hold whose reply is lost is released by the acquisition that gave up; the outer hold stays', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const outer = await lock.acquire({ _id: 1 }, { owner: 'o' });
    // The nested hold's write lands, its reply comes after the call's deadline.
    const slow = writeLock({ collection: delayedCollection(collection, { reply: (method) => (method === 'findOneAndUpdate' ? 1_000 : 0) }), locktimeout: 60_000, timeout: 300 });
    const lost = await rejectionOf(slow.acquire({ _id: 1 }, { owner: 'o' }));
    expect(lost.subtype).to.equal('DbError');
    for (let i = 0; i < 100 && (await entries(collection, 1)).length > 1; i++) await sleep(50);
    expect((await entries(collection, 1)).map((entry) => entry.id)).to.deep.equal([outer.id]);
    expect(await whatAnAcquisitionGets(lock, { _id: 1 })).to.equal('LockAlreadyTaken');
    await outer.release();
  });
});
