/**
 * Minimum hold (`minHold`): a release before `timestamp + minHold` ends the caller's hold but
 * leaves its entry until then, no hold any more, refusing every other acquisition as a held lock
 * does. Judged by the server's clock (the stored acquisition stamp), never the client's.
 */
import * as Boom from '@hapi/boom';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, multiLock, resourceLocks, semaphore, writeLock, type LockHandle } from '../../lib';
import { failureOf, freshCollection, mongoBackend, newClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';
import { gate, isAcquisition } from '../support/lock-commands';
import { delayedCollection } from '../../stress/delayed-collection';

/** The stored entries of `tag` on document `_id`. */
async function entriesOf(collection: Collection<Document>, _id: unknown, tag = 'write'): Promise<Document[]> {
  const doc = await collection.findOne({ _id } as Document);
  return ((doc?.lock as Document | undefined)?.tags as Document | undefined)?.[tag] ?? [];
}

describe('minHold: a released lock stays taken until its minimum hold ends', () => {
  it('writeLock: released early, the entry refuses others with the 409 a held lock gives until timestamp + minHold; then the lock is free', async () => {
    const collection = await freshCollection([{ _id: 1, runs: 0 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 800 });
    expect(held.minHoldUntil).to.equal(held.timestamp + 800);
    const whileHeld = await rejectionOf(lock.acquire({ _id: 1 }, { boom: Boom }));
    await held.release();
    const stored = await entriesOf(collection, 1);
    expect(stored).to.have.length(1);
    expect(stored[0]!.kept).to.equal(true);
    expect(stored[0]!.id).to.not.equal(held.id);
    expect(stored[0]!.exp.getTime(), 'kept until the stored stamp + minHold').to.equal(held.timestamp + 800);
    const afterRelease = await rejectionOf(lock.acquire({ _id: 1 }, { boom: Boom }));
    expect(afterRelease.subtype).to.equal(whileHeld.subtype);
    expect((afterRelease as unknown as Boom.Boom).output.statusCode).to.equal(409);
    // A waiter gets it once the minimum hold ended by the server's clock (its stamp says so), not handed over by the release.
    const next = await lock.acquire({ _id: 1 }, { wait: 10_000 });
    expect(next.timestamp).to.be.at.least(held.timestamp + 800);
    await next.release();
  });

  it('waiters in other clients (woken by the release\'s change, refused, then asleep until the hold ends) get the lock once it ends, by the server\'s clock', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const clients = await Promise.all([newClient(), newClient()]);
    const waiters = clients.map((client) => writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: 10_000 }));
    const held = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 }, { minHold: 700 });
    // Each waiter holds the lock in turn, releasing it as soon as it has it.
    const waiting = waiters.map((lock) => lock.acquire({ _id: 1 }, { wait: 10_000 }).then(async (handle) => (await handle.release(), handle.timestamp)));
    await held.release();
    const stamps = await Promise.all(waiting);
    for (const stamp of stamps) expect(stamp, 'stamped once the minimum hold ended').to.be.at.least(held.minHoldUntil!);
  });

  it('the entry left is no hold: guard() matches nothing, extend and a second release are LockNotFound, the owner cannot re-enter it', async () => {
    const collection = await freshCollection([{ _id: 1, n: 0 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000, owner: 'job' });
    const guard = held.guard();
    expect((await collection.updateOne(guard, { $inc: { n: 1 } })).modifiedCount).to.equal(1);
    await held.release();
    expect((await collection.updateOne(guard, { $inc: { n: 1 } })).modifiedCount, 'guard after the release').to.equal(0);
    expect((await collection.updateOne(held.guard(), { $inc: { n: 1 } })).modifiedCount).to.equal(0);
    expect((await rejectionOf(held.extend())).subtype).to.equal('LockNotFound');
    expect((await rejectionOf(held.release())).subtype).to.equal('LockNotFound');
    expect((await rejectionOf(lock.release({ _id: 1 }, { lock: JSON.parse(JSON.stringify(held)) as LockHandle }))).subtype).to.equal('LockNotFound');
    expect((await rejectionOf(lock.acquire({ _id: 1 }, { owner: 'job' }))).subtype, 'the same owner').to.equal('LockAlreadyTaken');
    const stored = await entriesOf(collection, 1);
    expect(stored).to.have.length(1);
    expect(stored[0]!.owner).to.equal(undefined);
    expect((await collection.findOne({ _id: 1 } as Document))!.n).to.equal(1);
  });

  it('inspect shows the entry as kept until its end; a forced release removes it (and ends the minimum hold)', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 9_000 });
    await held.release();
    const seen = await lock.inspect({ _id: 1 });
    expect(seen.locks).to.have.length(1);
    expect(seen.locks[0]!.keptUntil?.getTime()).to.equal(held.timestamp + 9_000);
    expect(seen.locks[0]!.expiresAt?.getTime()).to.equal(held.timestamp + 9_000);
    await lock.release({ _id: 1 });
    expect(await entriesOf(collection, 1)).to.deep.equal([]);
    await (await lock.acquire({ _id: 1 })).release();
  });

  it('a release after the minimum hold ended (by the server\'s clock) frees the lock at once, as without minHold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 50 });
    await lock.acquire({ _id: 1 }, { wait: 2_000, minHold: 50 }).then(
      () => expect.fail('held'),
      () => undefined,
    );
    await held.release();
    // Kept (never judged by this client's clock), but expired at once: the lock is free.
    expect((await entriesOf(collection, 1)).every((entry) => entry.exp.getTime() <= held.minHoldUntil!)).to.equal(true);
    await (await writeLock({ collection }).acquire({ _id: 1 })).release();
  });

  it('an abandoned acquisition (aborted while its attempt was on its way) removes the entry it wrote: nobody ran under it, and it keeps nobody out', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    let acquisitions = 0;
    const slow = delayedCollection(collection, { reply: (method, _n, args) => (isAcquisition(method, args) && ++acquisitions === 1 ? 400 : 0) });
    const lock = writeLock({ collection: slow, locktimeout: 10_000, changeStreams: false });
    const controller = new AbortController();
    const abandoned = lock.acquire({ _id: 1 }, { minHold: 9_000, signal: controller.signal });
    for (let i = 0; i < 100 && (await entriesOf(collection, 1)).length === 0; i++) await sleep(10);
    expect(await entriesOf(collection, 1), 'its attempt landed').to.have.length(1);
    controller.abort(new Error('the caller went away'));
    expect((await rejectionOf(abandoned)).message).to.equal('the caller went away');
    for (let i = 0; i < 200 && (await entriesOf(collection, 1)).length > 0; i++) await sleep(10);
    expect(await entriesOf(collection, 1), 'removed, not kept').to.deep.equal([]);
    await (await writeLock({ collection }).acquire({ _id: 1 })).release();
  });

  it('with several clocks (maxClockSkew), the minimum hold is stored 4 × the skew longer, as a lease is; an extension by minHold is still accepted', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 5_000, maxClockSkew: 100 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    expect(held.minHoldUntil).to.equal(held.timestamp + 5_000 + 400);
    expect((await entriesOf(collection, 1))[0]!.hold.getTime()).to.equal(held.minHoldUntil);
    await held.extend(5_000);
    expect(await failureOf(() => held.extend(4_999))).to.be.instanceOf(TypeError);
    await held.release();
    expect((await entriesOf(collection, 1))[0]!.exp.getTime()).to.equal(held.minHoldUntil);
  });

  it('a lock taken without minHold stores and sends what it did before: no hold field, removed by its release', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const held = await lock.acquire({ _id: 1 });
    expect(Object.keys((await entriesOf(collection, 1))[0]!).sort()).to.deep.equal(['at', 'exp', 'id']);
    expect(held.minHoldUntil).to.equal(undefined);
    expect(JSON.parse(JSON.stringify(held))).to.not.have.property('minHoldUntil');
    await held.release();
    // Kept (never judged by this client's clock), but expired at once: the lock is free.
    expect((await entriesOf(collection, 1)).every((entry) => entry.exp.getTime() <= held.minHoldUntil!)).to.equal(true);
    await (await writeLock({ collection }).acquire({ _id: 1 })).release();
  });

  it('a commit before the minimum hold ends applies its update and keeps the entry', async () => {
    const collection = await freshCollection([{ _id: 1, done: false }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    await held.release({ update: { $set: { done: true } } });
    expect((await collection.findOne({ _id: 1 } as Document))!.done).to.equal(true);
    expect((await entriesOf(collection, 1))[0]!.kept).to.equal(true);
    expect((await rejectionOf(lock.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
  });

  it('a commit still on its way when its call gives up is settled not applied, and the entry is kept until the minimum hold ends, not removed', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1, done: false }]);
    const late = gate(); // the commit (the first updateOne) reaches the server only after the call's deadline and the settling write
    const slow = delayedCollection(collection, { request: (method, n) => (method === 'updateOne' && n === 1 ? late.promise : 0) });
    const lock = writeLock({ collection: slow, locktimeout: 15_000, timeout: 2_000 });
    const error = await rejectionOf(lock.using({ _id: 1 }, { minHold: 15_000 }, () => commit({ $set: { done: true } }, 'ran')));
    late.open();
    await sleep(300);
    expect({ subtype: error.subtype, applied: (error.data as { applied?: unknown }).applied }).to.deep.equal({ subtype: 'DbError', applied: false });
    expect((await collection.findOne({ _id: 1 } as Document))!.done, 'the late commit did not land').to.equal(false);
    const stored = await entriesOf(collection, 1);
    expect(stored.map((entry) => entry.kept)).to.deep.equal([true]);
    expect((await rejectionOf(writeLock({ collection }).acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
  });

  it('run once per window: clients that start the same job together with minHold, one of them late, run it once', async () => {
    const collection = await freshCollection([{ _id: 'nightly', runs: 0 }]);
    const clients = await Promise.all(Array.from({ length: 6 }, () => newClient()));
    const locks = clients.map((client) => writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: 20_000 }));
    const runJob = async (index: number): Promise<boolean> => {
      const handle = await locks[index]!.acquire({ _id: 'nightly' }, { minHold: 10_000 }).catch(() => undefined);
      if (!handle) return false;
      await collection.updateOne(handle.guard(), { $inc: { runs: 1 } });
      await handle.release(); // the job was quick: released long before its minimum hold ends
      return true;
    };
    const first = await Promise.all(locks.slice(0, 5).map((_, index) => runJob(index)));
    // The sixth instance runs late, after the winner released.
    const late = await runJob(5);
    expect(first.filter(Boolean)).to.have.length(1);
    expect(late).to.equal(false);
    expect((await collection.findOne({ _id: 'nightly' } as Document))!.runs).to.equal(1);
  });

  it('run once per window across processes: three processes start the job each tick, some late by up to 300 ms; the winners\' stamps lie minHold apart, never two runs in one tick', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'job', runs: [] }]);
    const minHold = 600;
    const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, start: Date.now() + 5_000, interval: 1_000, ticks: 4, minHold, lateBy: 300 };
    const script = join(__dirname, '..', 'support', 'scheduled-job-process.ts');
    const codes = await Promise.all(
      ['a', 'b', 'c'].map(
        (name) =>
          new Promise<number | null>((resolve) => {
            const child = spawn(process.execPath, ['--import', 'tsx', script, JSON.stringify({ ...settings, name })], { stdio: ['ignore', 'ignore', 'inherit'] });
            child.on('exit', (code) => resolve(code));
          }),
      ),
    );
    expect(codes).to.deep.equal([0, 0, 0]);
    const runs = ((await collection.findOne({ _id: 'job' } as Document))!.runs as Array<{ tick: number; by: string; stamp: number }>).sort((a, b) => a.stamp - b.stamp);
    expect(runs.length, 'ran at all').to.be.greaterThan(0);
    expect(new Set(runs.map((run) => run.tick)).size, `one run per tick: ${JSON.stringify(runs)}`).to.equal(runs.length);
    for (let i = 1; i < runs.length; i++) expect(runs[i]!.stamp - runs[i - 1]!.stamp, 'by the server\'s stamps').to.be.at.least(minHold);
  });

  it('multiLock: a tag released early refuses what it refused while held until its end; a tag concurrent with it is not refused', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = multiLock({ collection, locktimeouts: { read: 10_000, write: 10_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } } });
    const writer = await lock.acquire({ _id: 1 }, { tag: 'write', minHold: 5_000 });
    await writer.release();
    expect((await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'read' }))).subtype).to.equal('CooperativeLock');
    expect((await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');
    const readers = multiLock({ collection, locktimeouts: { read: 10_000, write: 10_000 }, lockRelationships: { write: { cooperative: ['write', 'read'] } } });
    const reader = await readers.acquire({ _id: 2 }, { tag: 'read', minHold: 5_000 }).catch(() => undefined);
    expect(reader, 'no such document').to.equal(undefined);
    await collection.insertOne({ _id: 3 } as Document);
    await (await readers.acquire({ _id: 3 }, { tag: 'read', minHold: 5_000 })).release();
    const another = await readers.acquire({ _id: 3 }, { tag: 'read' });
    expect((await rejectionOf(readers.acquire({ _id: 3 }, { tag: 'write' }))).subtype, 'a writer waits for the kept reader').to.equal('CooperativeLock');
    await another.release();
    expect((await rejectionOf(readers.acquire({ _id: 3 }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');
  });

  it('semaphore: a permit released early still counts until its end', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 2, locktimeout: 10_000 });
    const a = await pool.acquire({ _id: 1 }, { minHold: 5_000 });
    await a.release();
    const b = await pool.acquire({ _id: 1 }, { minHold: 5_000 });
    expect((await rejectionOf(pool.acquire({ _id: 1 }, { minHold: 5_000 }))).subtype).to.equal('SemaphoreFull');
    await b.release();
    expect((await rejectionOf(pool.acquire({ _id: 1 }, { minHold: 5_000 }))).subtype).to.equal('SemaphoreFull');
    expect((await pool.inspect({ _id: 1 })).permits.permit!.used).to.equal(2);
  });

  it('resource locks: xlock, slock and using keep a released lock until its end; unlock and renew by its lock id leave it; status shows it kept; purge does not remove it early', async () => {
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const held = await locks.xlock('report', 'job-1', { ttl: 20_000, minHold: 10_000 });
    expect(held.minHoldUntil).to.equal(held.timestamp + 10_000);
    await held.release();
    expect((await rejectionOf(locks.xlock('report', 'job-2', { ttl: 20_000 }))).subtype).to.equal('LockAlreadyTaken');
    expect((await rejectionOf(locks.xlock('report', 'job-1', { ttl: 20_000 }))).subtype, 'the same lock id').to.equal('LockAlreadyTaken');
    expect((await rejectionOf(locks.slock('report', 'job-3', { ttl: 20_000 }))).subtype).to.equal('LockAlreadyTaken');
    expect((await rejectionOf(held.release())).subtype).to.equal('LockNotFound');
    expect(await locks.unlock('job-1'), 'unlock by the lock id').to.deep.equal([]);
    expect((await rejectionOf(locks.renew('job-1', 20_000))).subtype).to.equal('LockNotFound');
    await locks.purge();
    const status = await locks.status({ resource: 'report' });
    expect(status.map((lock) => lock.lockId)).to.deep.equal(['job-1:kept']);
    expect(status[0]!.expiresAt!.getTime()).to.equal(held.timestamp + 10_000);
    expect((await rejectionOf(locks.xlock('report', 'job-2', { ttl: 20_000 }))).subtype, 'after purge').to.equal('LockAlreadyTaken');

    const shared = await locks.using('queue', 'job-4', { ttl: 20_000, shared: true, minHold: 10_000 }, (handle) => handle.fence);
    expect(shared).to.be.a('number');
    expect((await rejectionOf(locks.xlock('queue', 'job-5', { ttl: 20_000 }))).subtype, 'an exclusive lock waits for the kept shared one').to.equal('LockAlreadyTaken');
    await (await locks.slock('queue', 'job-6', { ttl: 20_000 })).release();
    expect(await failureOf(() => locks.xlock('x', 'job-7', { ttl: 1_000, minHold: 2_000 }))).to.be.instanceOf(TypeError);
  });

  it('bad minHold is refused with a TypeError before anything is written: 0, past the lease, not an integer, with a lock to continue; typos are named', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 1_000 });
    const multi = multiLock({ collection, locktimeouts: { read: 1_000 } });
    const pool = semaphore({ collection, limit: 2, locktimeout: 1_000 });
    let before = await snapshotOf(collection);
    for (const minHold of [0, -1, 1.5, 1_001, '100', null, Infinity]) {
      const error = await failureOf(() => lock.acquire({ _id: 1 }, { minHold } as never));
      expect(error, String(minHold)).to.be.instanceOf(TypeError);
      expect(error.message).to.match(/params\.minHold/);
    }
    expect(await failureOf(() => lock.using({ _id: 1 }, { minHold: 2_000 }, () => undefined))).to.be.instanceOf(TypeError);
    const held = await lock.acquire({ _id: 1 }, { minHold: 500 });
    const heldBefore = await snapshotOf(collection);
    expect((await failureOf(() => held.extend(499))).message, 'a lease shorter than the minimum hold').to.match(/at least the lock's minHold \(500 ms\)/);
    expect(await failureOf(() => lock.extend({ _id: 1 }, { lock: held, locktimeout: 100 }))).to.be.instanceOf(TypeError);
    expect(await snapshotOf(collection)).to.equal(heldBefore);
    await held.extend(500);
    await lock.forceRelease({ _id: 1 });
    before = await snapshotOf(collection);
    expect(await failureOf(() => multi.acquire({ _id: 1 }, { tag: 'read', minHold: 0 }))).to.be.instanceOf(TypeError);
    expect(await failureOf(() => pool.acquire({ _id: 1 }, { minHold: 1_001 }))).to.be.instanceOf(TypeError);
    expect((await failureOf(() => lock.acquire({ _id: 1 }, { minhold: 100 } as never))).message).to.match(/minhold.*Did you mean `minHold`/);
    expect(await snapshotOf(collection)).to.equal(before);
  });
});
