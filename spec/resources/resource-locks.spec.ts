import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, resourceLocks, type ResourceLocks } from '../../lib';
import { realNow } from '../support/clock';
import { commandsSentBy, freshCollection, mongoBackend, newClient, rejectionOf, sleep } from '../support/fixture';

async function lockCollection(): Promise<{ collection: Collection<Document>; locks: ResourceLocks }> {
  const collection = await freshCollection();
  const locks = resourceLocks({ collection });
  await locks.createIndexes();
  return { collection, locks };
}

describe('resource locks', () => {
  it('createIndexes: lookups by lock id, owner and expiry, and a TTL index on a date (resources are unique by _id)', async () => {
    const { collection, locks } = await lockCollection();
    expect(await locks.createIndexes()).to.include('gc_ttl');
    const indexes = await collection.listIndexes().toArray();
    const byName = Object.fromEntries(indexes.map((index) => [index.name, index]));
    expect(byName.gc_ttl?.expireAfterSeconds).to.equal(0);
    for (const name of ['exclusive_group', 'shared_group', 'exclusive_owner', 'shared_owner', 'exclusive_exp', 'shared_exp']) {
      expect(byName, name).to.have.property(name);
    }
    const held = await locks.xlock('r', 'id1', { ttl: 60_000 });
    const doc = await collection.findOne({ _id: 'r' as never });
    expect(doc?.gcAt).to.be.instanceOf(Date);
    expect(doc?.gcAt.getTime()).to.be.at.least(held.expiresAt);
  });

  describe('conflicts', () => {
    it('exclusive vs exclusive, whatever the lock id', async () => {
      const { locks } = await lockCollection();
      const first = await locks.xlock('r', 'a');
      expect(first.type).to.equal('exclusive');
      expect((await rejectionOf(locks.xlock('r', 'b'))).subtype).to.equal('LockAlreadyTaken');
      expect((await rejectionOf(locks.xlock('r', 'a'))).subtype).to.equal('LockAlreadyTaken');
      await locks.xlock('other', 'b');
    });

    it('exclusive vs shared, in both orders', async () => {
      const { locks } = await lockCollection();
      await locks.xlock('r1', 'a');
      expect((await rejectionOf(locks.slock('r1', 'b'))).subtype).to.equal('LockAlreadyTaken');
      await locks.slock('r2', 'a');
      await locks.slock('r2', 'b');
      expect((await rejectionOf(locks.xlock('r2', 'c'))).subtype).to.equal('LockAlreadyTaken');
    });

    it('as boom errors: 409 LockAlreadyTaken; 409 LockNotFound', async () => {
      const collection = await freshCollection();
      const locks = resourceLocks({ collection, boom: Boom });
      await locks.xlock('r', 'a');
      const conflict = await rejectionOf(locks.xlock('r', 'b'));
      expect(Boom.isBoom(conflict) && conflict.output.statusCode).to.equal(409);
      expect((conflict as unknown as Boom.Boom).output.payload.message).to.equal('LockAlreadyTaken');
      const missing = await rejectionOf(locks.renew('nobody', 1_000));
      expect(Boom.isBoom(missing) && missing.output.payload.message).to.equal('LockNotFound');
    });
  });

  describe('expiry', () => {
    it('an expired exclusive lock never blocks a shared one, nor expired shared locks an exclusive one (square/mongo-lock #4)', async () => {
      const { locks } = await lockCollection();
      await locks.xlock('r', 'x', { ttl: 100 });
      await sleep(150);
      const shared = await locks.slock('r', 's', { ttl: 100 });
      await locks.slock('r', 't', { ttl: 100 });
      expect((await rejectionOf(locks.xlock('r', 'x2'))).subtype).to.equal('LockAlreadyTaken');
      await sleep(150);
      const taken = await locks.xlock('r', 'x2', { ttl: 5_000 });
      expect(taken.fence).to.be.greaterThan(shared.fence);
      expect((await locks.status({ resource: 'r' })).map((s) => s.lockId)).to.deep.equal(['x2']);
    });

    it('takeover of an exclusive lock after expiry', async () => {
      const { locks } = await lockCollection();
      const first = await locks.xlock('r', 'a', { ttl: 100 });
      expect((await rejectionOf(locks.xlock('r', 'b', { ttl: 100 }))).subtype).to.equal('LockAlreadyTaken');
      await sleep(150);
      const second = await locks.xlock('r', 'b', { ttl: 100 });
      expect(second.fence).to.equal(first.fence + 1);
      expect((await rejectionOf(first.release())).subtype).to.equal('LockNotFound');
    });
  });

  describe('shared locks', () => {
    it('maxConcurrent limits live holders; negative is unlimited; one shared lock per lock id', async () => {
      const { locks } = await lockCollection();
      await locks.slock('r', 'a', {}, 2);
      const b = await locks.slock('r', 'b', {}, 2);
      expect((await rejectionOf(locks.slock('r', 'c', {}, 2))).subtype).to.equal('LockAlreadyTaken');
      await b.release();
      await locks.slock('r', 'c', {}, 2);
      for (let i = 0; i < 10; i++) await locks.slock('u', `reader-${i}`, {}, -1);
      expect(await locks.status({ resource: 'u' })).to.have.length(10);
      expect((await rejectionOf(locks.slock('u', 'reader-3'))).subtype).to.equal('LockAlreadyTaken');
      expect(() => locks.slock('u', 'z', {}, 0)).not.to.throw();
      expect((await rejectionOf(locks.slock('u', 'z', {}, 0))).name).to.equal('RangeError');
    });

    it('expired shared holders do not count against maxConcurrent', async () => {
      const { collection, locks } = await lockCollection();
      await locks.slock('r', 'a', { ttl: 60_000 }, 1);
      expect((await rejectionOf(locks.slock('r', 'b', {}, 1))).subtype).to.equal('LockAlreadyTaken');
      // a's lease ends (its expiry moved into the past by the server's clock, as time would).
      await collection.updateOne({ _id: 'r' as never }, { $set: { 'lock.tags.shared.$[].exp': new Date(Date.now() - 1_000) } });
      await locks.slock('r', 'b', {}, 1);
    });
  });

  describe('lock groups', () => {
    it('one lock id on several resources is unlocked together, newest first', async () => {
      const { locks } = await lockCollection();
      await locks.xlock('r1', 'job', { owner: 'ann' });
      await sleep(5);
      await locks.slock('r2', 'job', { owner: 'ann' });
      await sleep(5);
      await locks.xlock('r3', 'job', { owner: 'ann' });
      await locks.xlock('r4', 'other');
      const released = await locks.unlock('job');
      expect(released.map((s) => `${s.resource}:${s.type}`)).to.deep.equal(['r3:exclusive', 'r2:shared', 'r1:exclusive']);
      expect(await locks.status({ lockId: 'job' })).to.deep.equal([]);
      await locks.xlock('r1', 'next');
      expect((await locks.status()).map((s) => s.lockId).sort()).to.deep.equal(['next', 'other']);
      expect(await locks.unlock('nobody')).to.deep.equal([]);
    });

    it('renew: a whole group, an unknown id, and a group with one expired member', async () => {
      const { locks } = await lockCollection();
      const one = await locks.xlock('r1', 'g', { ttl: 300 });
      await locks.slock('r2', 'g', { ttl: 300 });
      await sleep(100);
      const renewed = await locks.renew('g', 5_000);
      expect(renewed).to.have.length(2);
      for (const status of renewed) {
        expect(status.expiresAt!.getTime()).to.be.greaterThan(one.expiresAt + 4_000);
        expect(status.renewedAt).to.be.instanceOf(Date);
      }
      const unknown = await rejectionOf(locks.renew('missing', 1_000));
      expect(unknown.subtype).to.equal('LockNotFound');
      expect(unknown.message).to.match(/no lock with lockId missing/);

      await locks.xlock('r3', 'h', { ttl: 5_000 });
      await locks.xlock('r4', 'h', { ttl: 60 });
      await sleep(100);
      const partial = await rejectionOf(locks.renew('h', 5_000));
      expect(partial.subtype).to.equal('LockNotFound');
      expect(partial.message).to.match(/expired locks: r4 \(exclusive\)/);
    });
  });

  it('status filters by resource, lock id, owner, creation time and remaining lease', async () => {
    const { locks } = await lockCollection();
    await locks.xlock('r1', 'a', { owner: 'ann', host: 'h1', comment: 'first', ttl: 1_000 });
    await sleep(20);
    const middle = new Date();
    await sleep(20);
    await locks.slock('r2', 'b', { owner: 'bob', ttl: 60_000 });
    await locks.slock('r2', 'c', { owner: 'bob' });
    const ids = async (filter: object): Promise<string[]> => (await locks.status(filter)).map((s) => s.lockId).sort();
    expect(await ids({})).to.deep.equal(['a', 'b', 'c']);
    expect(await ids({ resource: 'r2' })).to.deep.equal(['b', 'c']);
    expect(await ids({ lockId: 'a' })).to.deep.equal(['a']);
    expect(await ids({ owner: 'bob' })).to.deep.equal(['b', 'c']);
    expect(await ids({ createdBefore: middle })).to.deep.equal(['a']);
    expect(await ids({ createdAfter: middle })).to.deep.equal(['b', 'c']);
    expect(await ids({ ttlBelow: 2_000 })).to.deep.equal(['a']);
    expect(await ids({ ttlAtLeast: 2_000 })).to.deep.equal(['b', 'c']);
    const [a] = await locks.status({ lockId: 'a' });
    expect(a).to.include({ resource: 'r1', type: 'exclusive', owner: 'ann', host: 'h1', comment: 'first', renewedAt: null });
    const [c] = await locks.status({ lockId: 'c' });
    expect(c).to.include({ ttl: -1, expiresAt: null });
    expect((await rejectionOf(locks.status({ createdBefore: 'yesterday' as never }))).name).to.equal('TypeError');
  });

  it('purge removes expired locks and deletes documents that hold none (square/mongo-lock #17)', async () => {
    const { collection, locks } = await lockCollection();
    await locks.xlock('gone', 'a', { ttl: 50 });
    await locks.slock('half', 'b', { ttl: 50 });
    await locks.slock('half', 'c', { ttl: 60_000 });
    await locks.xlock('forever', 'd');
    await sleep(100);
    const result = await locks.purge();
    expect(result.documentsDeleted).to.equal(1);
    expect(result.documentsPruned).to.be.at.least(1);
    expect((await collection.find({ _id: { $type: 'string' } as never }).toArray()).map((doc) => doc._id).sort()).to.deep.equal(['forever', 'half']);
    expect((await collection.findOne({ _id: 'half' as never }))?.lock.tags.shared.map((e: { group: string }) => e.group)).to.deep.equal(['c']);
    await locks.xlock('gone', 'e');

    const loop = locks.purgeEvery(30);
    await locks.xlock('looped', 'f', { ttl: 20 });
    await sleep(120);
    await loop.stop();
    expect(await collection.countDocuments({ _id: 'looped' as never })).to.equal(0);
  });

  describe('fencing tokens', () => {
    it('strictly increase per resource and never reset, even when the document is purged and re-created', async () => {
      const { locks } = await lockCollection();
      const fences: number[] = [];
      for (let i = 0; i < 5; i++) {
        const lock = await locks.xlock('r', `id${i}`, { ttl: 30 });
        fences.push(lock.fence);
        await lock.release();
        if (i % 2 === 1) expect((await locks.purge()).documentsDeleted).to.equal(1);
      }
      for (let i = 1; i < fences.length; i++) expect(fences[i]).to.be.greaterThan(fences[i - 1]!);
    });

    it('many clients racing to be first on a new resource: exactly one exclusive holder, fences strictly increasing', async function () {
      this.timeout(60_000);
      const collection = await freshCollection(); // no createIndexes(): the document's _id alone keeps it unique
      const clients = await Promise.all([0, 1, 2, 3].map(() => newClient()));
      const clientsLocks = clients.map((client) => resourceLocks({ collection: client.db(collection.dbName).collection(collection.collectionName) }));
      const outcomes = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => clientsLocks[i % 4]!.xlock('fresh', `racer-${i}`, { ttl: 60_000 })));
      const won = outcomes.filter((outcome) => outcome.status === 'fulfilled');
      expect(won).to.have.length(1);
      for (const outcome of outcomes) {
        if (outcome.status === 'rejected') expect(isLockError(outcome.reason, 'LockAlreadyTaken'), String(outcome.reason)).to.equal(true);
      }
      expect(await collection.countDocuments({ _id: 'fresh' as never })).to.equal(1);

      const order: number[] = [];
      await Promise.all(
        clientsLocks.map(async (locks, worker) => {
          for (let round = 0; round < 10; round++) {
            await locks.using('hot', `w${worker}-${round}`, { ttl: 5_000, wait: 20_000 }, async (lock) => {
              order.push(lock.fence);
              await sleep(1);
            });
          }
        }),
      );
      expect(order).to.have.length(40);
      for (let i = 1; i < order.length; i++) expect(order[i]).to.be.greaterThan(order[i - 1]!);
    });
  });

  it('a duplicate key from another unique index of the collection is reported, not taken for an existing resource', async () => {
    const collection = await freshCollection();
    await collection.createIndex({ legacy: 1 }, { unique: true }); // every resource document lacks it: null, the same key
    const locks = resourceLocks({ collection });
    await (await locks.xlock('a', 'x')).release();
    const error = await rejectionOf(locks.xlock('b', 'x'));
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/duplicate key/i);
  });

  describe('round trips (driver command monitoring)', () => {
    it('first use of a resource by a client is two commands (create if missing, then the checked lock); a known one is one; a refusal two', async () => {
      const { locks } = await lockCollection();
      const fresh = await commandsSentBy(() => locks.xlock('new', 'a'));
      expect(fresh.commands, 'the document is created without a lock, then locked by the checked update').to.deep.equal(['update', 'findAndModify']);
      await locks.unlock('a');
      const known = await commandsSentBy(() => locks.xlock('new', 'b'));
      expect(known.commands).to.deep.equal(['findAndModify']);
      const refused = await commandsSentBy(() => locks.xlock('new', 'c'));
      expect((refused.error as Error & { subtype?: string }).subtype).to.equal('LockAlreadyTaken');
      expect(refused.commands).to.deep.equal(['findAndModify', 'aggregate']);
    });
  });

  it('handle.extend() without an argument renews to the lock\'s own ttl (and a lock without one stays without)', async () => {
    const { locks } = await lockCollection();
    const leased = await locks.xlock('r', 'a', { ttl: 2_000 });
    await sleep(50);
    await leased.extend();
    expect(leased.expiresAt - Date.now()).to.be.within(1_500, 2_100);
    const [status] = await locks.status({ lockId: 'a' });
    expect(status?.expiresAt).to.be.instanceOf(Date);
    const forever = await locks.xlock('q', 'b');
    await forever.extend();
    expect((await locks.status({ lockId: 'b' }))[0]?.ttl).to.equal(-1);
  });

  it('using() renews the lease while the body runs and releases afterwards', async () => {
    const { locks } = await lockCollection();
    const result = await locks.using('r', 'job', { ttl: 150 }, async (lock, signal) => {
      await sleep(400);
      expect(signal.aborted).to.equal(false);
      expect((await rejectionOf(locks.xlock('r', 'other'))).subtype).to.equal('LockAlreadyTaken');
      return lock.fence;
    });
    expect(result).to.be.a('number');
    expect(await locks.status({ resource: 'r' })).to.deep.equal([]);
    console.log(`      backend: ${mongoBackend().server}`);
  });

  it('rejects bad arguments before anything is written', async () => {
    const { collection, locks } = await lockCollection();
    const bad: Array<[() => PromiseLike<unknown>, RegExp]> = [
      [() => locks.xlock('', 'a'), /`resource`/],
      [() => locks.xlock(5 as never, 'a'), /`resource`/],
      [() => locks.xlock('r', { $ne: 1 } as never), /`lockId`/],
      [() => locks.xlock('r', 'a', { ttl: 0 }), /params.ttl/],
      [() => locks.xlock('r', 'a', { owner: 7 as never }), /params.owner/],
      [() => locks.slock('r', 'a', {}, 1.5), /maxConcurrent/],
      [() => locks.renew('a', -1), /`ttl`/],
      [() => locks.status({ ttlBelow: -5 }), /filter.ttlBelow/],
    ];
    for (const [call, message] of bad) expect((await rejectionOf(call())).message).to.match(message);
    expect(await collection.countDocuments({})).to.equal(0);
  });
});

/*
 * `renew(lockId, ttl)` tells the handles kept by using() their new expiry, so that their lease
 * keeper replans. The defect guarded against: a using() without `ttl` had no keeper at all (its
 * lease is endless), so nothing listened: a renew of its group turned its lock into a lease of
 * `ttl` ms that nobody extended, and the body's signal never aborted when the lease ended and
 * another client took the resource.
 */
describe('renew() of a group whose lock is held by using() without ttl', () => {
  it('the renewed lease is kept from then on: no other client takes it while the body\'s signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const other = resourceLocks({ collection });
    let abortedAt = 0;
    let bodyEndedAt = 0;
    const holding = locks.using('r', 'job-42', {}, async (_handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await locks.renew('job-42', 1_000); // e.g. a heartbeat that renews every lock of the job
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 3_000);
      });
      bodyEndedAt = realNow();
    });
    await sleep(100);
    const next = await other.xlock('r', 'someone-else', { wait: 5_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    const stoppedAt = abortedAt > 0 ? abortedAt : bodyEndedAt;
    expect(
      stoppedAt,
      `another client acquired; the body ${abortedAt > 0 ? 'was aborted' : 'was never aborted and ended'} ${Math.round(stoppedAt - acquiredAt)} ms later`,
    ).to.be.below(acquiredAt);
  });
});
