/**
 * One test per defect of the safety review (issue 11), each on the real backend with delays
 * injected into requests or replies, clock skew, aborts and several clients. Every test here
 * failed on the code before the fix (commit 00dcf13) and passes now.
 */
import Bluebird from 'bluebird';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, multiLock, resourceLocks, writeLock } from '../../lib';
import '../../lib/bluebird';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf, sleep, testDb } from '../support/fixture';

/** The unexpired entries of `tag` in a stored document. */
async function liveIds(collection: Collection<Document>, filter: Document, tag: string): Promise<string[]> {
  const doc = await collection.findOne(filter);
  const entries = (doc?.lock?.tags?.[tag] ?? []) as Array<{ id: string; exp: Date }>;
  return entries.filter((entry) => entry.exp.getTime() > Date.now()).map((entry) => entry.id);
}

describe('safety (issue 11): paths to a second holder or a leaked lock', () => {
  describe('defect 2: a resource\'s first lock is never stamped from an unchecked, lagging clock reading', () => {
    it('fencing tokens keep increasing across purge and re-creation by a client whose replies arrive 1.5 s late', async function () {
      this.timeout(30_000);
      const collection = await freshCollection();
      const prompt = resourceLocks({ collection });
      const late = resourceLocks({ collection: delayedCollection(collection, { reply: () => 1_500 }) });
      await late.xlock('warm-up', 'b', { ttl: 60_000 }); // the late client has heard from the server before
      const first = await prompt.xlock('r', 'a', { ttl: 60_000 });
      await first.release();
      expect((await prompt.purge()).documentsDeleted).to.equal(1);
      const second = await late.xlock('r', 'b', { ttl: 60_000 });
      expect(second.fence, 'the re-created document issues larger tokens').to.be.greaterThan(first.fence);
      await second.release();
    });

    it('a lock whose reply arrives after its ttl ended is never one the holder believes in while another client holds it', async function () {
      this.timeout(30_000);
      const collection = await freshCollection();
      const late = resourceLocks({ collection: delayedCollection(collection, { reply: () => 1_500 }) });
      const other = resourceLocks({ collection });
      const outcome = await late.xlock('r', 'late', { ttl: 1_000 }).then((handle) => handle, (error: Error) => error);
      if (outcome instanceof Error) {
        expect(isLockError(outcome, 'DbError'), String(outcome)).to.equal(true);
        expect(outcome.message).to.match(/after the lease/);
      } else {
        // The holder may believe in it only while the server's clock is still before its expiry.
        expect(outcome.expiresAt - realNow(), 'a lock handed over must still be live').to.be.greaterThan(0);
        expect((await rejectionOf(other.xlock('r', 'other', { ttl: 1_000 }))).subtype).to.equal('LockAlreadyTaken');
      }
      await sleep(50);
      expect((await other.status({ resource: 'r' })).map((s) => s.lockId), 'nothing left held for the late client').to.deep.equal([]);
    });
  });

  describe('defect 3: using() aborts its signal before another client can hold the lock', () => {
    it('a client whose clock is 0.9 s behind, whose extensions are delayed, aborts before the next holder acquires', async function () {
      this.timeout(30_000);
      const collection = await freshCollection([{ _id: 1 }]);
      // Once the body runs, every findOneAndUpdate (the extensions) reaches the server 1.9 s late.
      let bodyStarted = false;
      const slowExtensions = delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' && bodyStarted ? 1_900 : 0) });
      const skewed = writeLock({ collection: slowExtensions, locktimeout: 2_000, clock: () => realNow() - 900 });
      const other = writeLock({ collection, locktimeout: 2_000 });
      let abortedAt = 0;
      let firstFence = 0;
      const holding = skewed.using({ _id: 1 }, undefined, async (handle, signal) => {
        bodyStarted = true;
        firstFence = handle.fence;
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
        abortedAt = realNow();
      });
      await sleep(50);
      const next = await other.acquire({ _id: 1 }, { wait: 5_000 });
      const acquiredAt = realNow();
      await holding.catch(() => undefined);
      expect(abortedAt, 'the signal aborted').to.be.greaterThan(0);
      expect(abortedAt, `aborted ${abortedAt - acquiredAt} ms after the next holder acquired`).to.be.below(acquiredAt);
      expect(next.fence).to.be.greaterThan(firstFence);
      await next.release();
    });
  });

  describe('defect 4: an aborted resource lock keeps nothing an attempt in flight won', () => {
    for (const type of ['exclusive', 'shared'] as const) {
      it(`${type}: a lock written after the caller aborted is released (no ttl: it would be held forever)`, async function () {
        this.timeout(10_000);
        const collection = await freshCollection();
        const slow = resourceLocks({ collection: delayedCollection(collection, { reply: (method) => (method === 'findOneAndUpdate' ? 300 : 0) }) });
        const signal = AbortSignal.timeout(100);
        const params = { wait: 2_000, signal };
        const pending = type === 'exclusive' ? slow.xlock('r', 'aborted', params) : slow.slock('r', 'aborted', params);
        const error = await rejectionOf(pending);
        expect(error.name).to.equal('TimeoutError');
        await sleep(600);
        const other = resourceLocks({ collection });
        expect(await other.status({ resource: 'r' }), 'nothing is left held').to.deep.equal([]);
        await (await other.xlock('r', 'next')).release();
      });
    }
  });

  describe('defect 5: an assertive acquisition aborted during its registering attempt leaks no registration', () => {
    it('the registration that lands after the abort is released, so readers are not blocked', async function () {
      this.timeout(10_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const options = {
        locktimeouts: { read: 10_000, write: 20_000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      };
      const rw = multiLock({ collection, ...options });
      const slowWriter = multiLock({ collection: delayedCollection(collection, { reply: (method) => (method === 'findOneAndUpdate' ? 300 : 0) }), ...options });
      const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
      const error = await rejectionOf(slowWriter.acquire({ _id: 1 }, { tag: 'write', wait: 5_000, signal: AbortSignal.timeout(100) }));
      expect(error.name).to.equal('TimeoutError');
      await sleep(600);
      expect(await liveIds(collection, { _id: 1 }, 'write'), 'no write registration left').to.deep.equal([]);
      const nextReader = await rw.acquire({ _id: 1 }, { tag: 'read' });
      await Promise.all([reader.release(), nextReader.release()]);
    });
  });

  describe('defect 6: a handle keeps addressing the document it locked', () => {
    it('a job queue that changes the field its filter named: guard() still matches, release() works, using() releases', async () => {
      const collection = await freshCollection([{ _id: 1, status: 'open' }, { _id: 2 }]);
      const jobs = writeLock({ collection, locktimeout: 10_000 });
      const result = await jobs.using({ status: 'open' }, undefined, async (handle) => {
        const started = await collection.updateOne(handle.guard(), { $set: { status: 'running' } });
        const finished = await collection.updateOne(handle.guard({ status: 'running' }), { $set: { status: 'done' } });
        return [started.modifiedCount, finished.modifiedCount];
      });
      expect(result).to.deep.equal([1, 1]);
      expect(await liveIds(collection, { _id: 1 }, 'write'), 'using() released the lock').to.deep.equal([]);

      // A filter that names the lock field itself no longer matches once the lock is written.
      const handle = await jobs.acquire({ _id: 2, lock: { $exists: false } });
      expect((await collection.updateOne(handle.guard(), { $set: { touched: true } })).modifiedCount).to.equal(1);
      await handle.extend();
      await handle.release();
      expect(await liveIds(collection, { _id: 2 }, 'write')).to.deep.equal([]);
    });
  });

  describe('defect 7: a free document is never reported as held', () => {
    it('requests that reach the server later than the stamp tolerance fail as DbError naming the latency, not LockAlreadyTaken', async function () {
      this.timeout(15_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const slowRequests = delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' ? 200 : 0) });
      const lock = writeLock({ collection: slowRequests, locktimeout: 300 });
      for (const params of [{}, { wait: 1_500 }]) {
        const started = realNow();
        const error = await rejectionOf(lock.acquire({ _id: 1 }, params));
        expect(error.subtype, error.message).to.equal('DbError');
        expect(error.message).to.match(/too late|slower than this lease/);
        expect(realNow() - started, 'not retried as a conflict until wait ran out').to.be.below(1_400);
      }
      expect(await liveIds(collection, { _id: 1 }, 'write'), 'the document is free').to.deep.equal([]);
      await (await writeLock({ collection, locktimeout: 300 }).acquire({ _id: 1 })).release();
    });
  });

  describe('waiting: what stops a wait', () => {
    it('bluebird .timeout() with cancellation enabled stops a waiting acquire, which then takes nothing', async function () {
      this.timeout(10_000);
      const Cancellable = Bluebird.getNewLibraryCopy();
      Cancellable.config({ cancellation: true });
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 5_000, Promise: Cancellable });
      const holder = await lock.acquire({ _id: 1 });
      const waiting = lock.acquire({ _id: 1 }, { wait: 5_000 }).timeout(200);
      const error = await rejectionOf(waiting);
      expect(error).to.be.instanceOf(Bluebird.TimeoutError);
      await holder.release();
      await sleep(400);
      expect(await liveIds(collection, { _id: 1 }, 'write'), 'the abandoned wait took nothing').to.deep.equal([]);
      await (await lock.acquire({ _id: 1 })).release();
    });

    it('warns once per lock, and only when a wait under an uncancellable bluebird promise is held up', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const warnings: Error[] = [];
      const listen = (warning: Error): void => void warnings.push(warning);
      process.on('warning', listen);
      const codes = async (): Promise<string[]> => {
        await sleep(10);
        return warnings.map((warning) => (warning as Error & { code?: string }).code ?? '').filter((code) => code === 'MONGLOCK_UNCANCELLABLE_WAIT');
      };
      try {
        const lock = writeLock({ collection, Promise: Bluebird });
        await (await lock.acquire({ _id: 1 }, { wait: 100 })).release(); // uncontended: no abandoned wait could take anything
        expect(await codes(), 'uncontended').to.deep.equal([]);
        const holder = await writeLock({ collection }).acquire({ _id: 1 });
        for (let i = 0; i < 2; i++) expect((await rejectionOf(lock.acquire({ _id: 1 }, { wait: 50 }))).subtype).to.equal('LockAlreadyTaken');
        await holder.release();
        expect(await codes(), 'held up twice, warned once').to.deep.equal(['MONGLOCK_UNCANCELLABLE_WAIT']);
        expect(warnings.find((warning) => (warning as Error & { code?: string }).code === 'MONGLOCK_UNCANCELLABLE_WAIT')?.message).to.match(/wait: 50 ms.*`signal`.*cancellation: true/);
      } finally {
        process.off('warning', listen);
      }
    });

    it('wait is measured with the injected clock', async function () {
      this.timeout(10_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const start = realNow();
      const fourTimesFaster = (): number => start + (realNow() - start) * 4;
      await writeLock({ collection }).acquire({ _id: 1 });
      const lock = writeLock({ collection, clock: fourTimesFaster });
      const error = await rejectionOf(lock.acquire({ _id: 1 }, { wait: 2_000 }));
      expect(error.subtype).to.equal('LockAlreadyTaken');
      expect(realNow() - start, '2 s on a clock four times as fast').to.be.below(1_200);
    });
  });

  describe('real MongoDB semantics', () => {
    it('reads that decide an outcome go to the primary, whatever the collection\'s read preference', async () => {
      // A standalone test server has no secondary to read from, so the read preference each read
      // is sent with is recorded where the library hands it to the driver.
      const collection = await freshCollection([{ _id: 1 }]);
      const preferences: unknown[] = [];
      const onSecondary = testDb().collection(collection.collectionName, { readPreference: 'secondaryPreferred' });
      const recording = new Proxy(onSecondary, {
        get(target, property, receiver) {
          const value: unknown = Reflect.get(target, property, receiver);
          if (property !== 'aggregate' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
          return (pipeline: Document[], options?: { readPreference?: unknown }) => {
            preferences.push(options?.readPreference);
            return (value as (...args: unknown[]) => unknown).call(target, pipeline, options);
          };
        },
      });
      const lock = writeLock({ collection: recording });
      await lock.acquire({ _id: 1 });
      expect((await rejectionOf(lock.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
      const locks = resourceLocks({ collection: recording });
      await locks.xlock('r', 'a');
      await locks.status();
      expect(preferences).to.have.length.of.at.least(2);
      for (const preference of preferences) expect(preference).to.equal('primary');
    });

    it('filters MongoDB cannot explain a refusal with ($where, $near, $nearSphere) are refused before anything is written', async () => {
      const collection = await freshCollection([{ _id: 1, at: [0, 0] }]);
      const lock = writeLock({ collection });
      for (const filter of [{ $where: 'this._id === 1' }, { at: { $near: [0, 0] } }, { $and: [{ at: { $nearSphere: [0, 0] } }] }]) {
        const error = await rejectionOf(lock.acquire(filter));
        expect(error).to.be.instanceOf(TypeError);
        expect(error.message).to.match(/\$where|\$near/);
      }
      expect((await collection.findOne({ _id: 1 as never }))?.lock).to.equal(undefined);
    });
  });
});
