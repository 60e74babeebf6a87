import { expect } from 'chai';
import { isLockError, LockHandle, multiLock, writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { commandsSentBy, freshCollection, rejectionOf, sleep } from '../support/fixture';

const MINUTES_5 = 5 * 60_000;

function activeTimers(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
}

describe('lease safety', () => {
  describe('server-side time', () => {
    for (const skew of [MINUTES_5, -MINUTES_5]) {
      it(`a client whose clock is ${skew > 0 ? 'ahead' : 'behind'} by 5 minutes acquires, expires and releases as with a correct clock`, async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const skewed = writeLock({ collection, locktimeout: 300, clock: () => Date.now() + skew });
        const correct = writeLock({ collection, locktimeout: 300 });

        const first = await commandsSentBy(() => skewed.acquire({ _id: 1 }));
        expect(first.commands, 'first contact corrects the clock estimate').to.deep.equal(['findAndModify', 'aggregate', 'findAndModify']);
        const handle = first.result as LockHandle;
        expect(Math.abs(handle.timestamp - Date.now())).to.be.below(2_000);
        const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write[0];
        expect(Math.abs(stored.at.getTime() - Date.now())).to.be.below(2_000);
        expect(stored.exp.getTime() - stored.at.getTime()).to.equal(300);

        expect((await rejectionOf(correct.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
        await skewed.release({ _id: 1 }, { lock: handle });
        const second = await commandsSentBy(() => skewed.acquire({ _id: 1 }));
        expect(second.commands, 'afterwards one command').to.deep.equal(['findAndModify']);
        expect((await rejectionOf(skewed.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
        await sleep(350);
        const taken = await correct.acquire({ _id: 1 });
        expect((await rejectionOf(skewed.release({ _id: 1 }, { lock: second.result as LockHandle }))).subtype).to.equal('LockWasReacquired');
        await sleep(350);
        await skewed.acquire({ _id: 1 });
        expect(taken.fence).to.be.below(4);
      });
    }

    it('clients skewed in opposite directions exclude each other on one document', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const ahead = multiLock({ collection, locktimeouts: { x: 200 }, lockRelationships: { x: { cooperative: ['x'] } }, clock: () => Date.now() + MINUTES_5 });
      const behind = multiLock({ collection, locktimeouts: { x: 200 }, lockRelationships: { x: { cooperative: ['x'] } }, clock: () => Date.now() - MINUTES_5 });
      await ahead.acquire({ _id: 1 }, { tag: 'x' });
      expect((await rejectionOf(behind.acquire({ _id: 1 }, { tag: 'x' }))).subtype).to.equal('CooperativeLock');
      await sleep(250);
      await behind.acquire({ _id: 1 }, { tag: 'x' });
      expect((await rejectionOf(ahead.acquire({ _id: 1 }, { tag: 'x' }))).subtype).to.equal('CooperativeLock');
    });
  });

  describe('fencing tokens', () => {
    it('strictly increase per document over acquisitions, releases and expiries, for every kind of lock', async function () {
      this.timeout(60_000);
      const collection = await freshCollection([{ _id: 'doc', log: [] }]);
      const exclusive = writeLock({ collection, locktimeout: 60 });
      const tagged = multiLock({ collection, locktimeouts: { write: 60 }, lockRelationships: { write: { cooperative: ['write'] } } });
      let written = 0;
      await Promise.all(
        Array.from({ length: 8 }, async (_, worker) => {
          for (let round = 0; round < 15; round++) {
            const acquire = (): Promise<LockHandle> =>
              worker % 2 === 0 ? exclusive.acquire({ _id: 'doc' }, { wait: 5_000 }) : tagged.acquire({ _id: 'doc' }, { tag: 'write', wait: 5_000 });
            // On a loaded machine a reply can come after a 60 ms lease ended: the lock is refused
            // (and released), which is the library being right, not a fence out of order; try again.
            let handle: LockHandle | undefined;
            while (!handle) handle = await acquire().catch((error: unknown) => (isLockError(error, 'DbError') && /after the lease/.test(error.message) ? undefined : Promise.reject(error)));
            const logged = await collection.updateOne(handle.guard(), { $push: { log: handle.fence } as never });
            written += logged.modifiedCount;
            if (round % 4 === 3) continue; // a holder that "crashes": its lease runs out instead
            await handle.release().catch((error: unknown) => {
              // Under load a 60 ms lease can run out before the release: the guard kept that holder out.
              if (!isLockError(error, 'LockNotFound') && !isLockError(error, 'LockWasReacquired')) throw error;
            });
          }
        }),
      );
      const log = (await collection.findOne({ _id: 'doc' as never }))?.log as number[];
      expect(log.length).to.equal(written);
      expect(log.length).to.be.greaterThan(100);
      for (let i = 1; i < log.length; i++) expect(log[i], `entry ${i}`).to.be.greaterThan(log[i - 1]!);
    });
  });

  describe('guarded writes', () => {
    it('a paused holder whose lease ran out and was taken over writes nothing through its guard', async () => {
      const collection = await freshCollection([{ _id: 1, value: 'initial' }]);
      const lock = writeLock({ collection, locktimeout: 150 });
      const paused = await lock.acquire({ _id: 1 });
      expect((await collection.updateOne(paused.guard(), { $set: { value: 'paused, in time' } })).modifiedCount).to.equal(1);
      await sleep(200);
      expect((await collection.updateOne(paused.guard(), { $set: { value: 'paused, too late' } })).matchedCount).to.equal(0);
      const next = await lock.acquire({ _id: 1 }, { locktimeout: 5_000 });
      expect((await collection.updateOne(paused.guard(), { $set: { value: 'paused, taken over' } })).matchedCount).to.equal(0);
      expect((await collection.updateOne(next.guard({ value: 'paused, in time' }), { $set: { value: 'next' } })).modifiedCount).to.equal(1);
      expect((await collection.updateOne(next.guard({ value: 'other' }), { $set: { value: 'never' } })).matchedCount).to.equal(0);
      await next.release();
      expect((await collection.updateOne(next.guard(), { $set: { value: 'after release' } })).matchedCount).to.equal(0);
      expect((await collection.findOne({ _id: 1 as never }))?.value).to.equal('next');
    });
  });

  describe('extend', () => {
    it('pushes the lease forward from the server\'s now in one command', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 200 });
      const handle = await lock.acquire({ _id: 1 });
      const before = handle.expiresAt;
      await sleep(100);
      const extended = await commandsSentBy(() => handle.extend(400));
      expect(extended.commands).to.deep.equal(['findAndModify']);
      expect(handle.expiresAt).to.be.greaterThan(before + 250);
      await sleep(200);
      expect((await rejectionOf(lock.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
      const viaTimestamp = await lock.extend({ _id: 1 }, { timestamp: handle.timestamp, locktimeout: 1_000 });
      expect(viaTimestamp.expiresAt).to.be.greaterThan(handle.expiresAt);
    });

    it('fails clearly for a lost lock and never re-creates it', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 80 });
      const expired = await lock.acquire({ _id: 1 });
      await sleep(120);
      const notFound = await rejectionOf(expired.extend());
      expect(notFound.subtype).to.equal('LockNotFound');
      expect(notFound.message).to.match(/expired/);
      const next = await lock.acquire({ _id: 1 }, { locktimeout: 5_000 });
      expect((await rejectionOf(lock.extend({ _id: 1 }, { lock: expired }))).subtype).to.equal('LockWasReacquired');
      const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write;
      expect(stored.map((entry: { id: string }) => entry.id)).to.deep.equal([next.id]);

      const tagged = multiLock({ collection, locktimeouts: { r: 80 } });
      const reader = await tagged.acquire({ _id: 1 }, { tag: 'r' });
      await sleep(120);
      expect((await rejectionOf(tagged.extend({ _id: 1 }, { lock: reader }))).subtype).to.equal('LockNotFound');
      expect((await rejectionOf(tagged.extend({ _id: 2 }, { lock: reader }))).subtype).to.equal('RessourceNotFound');
    });
  });

  describe('using()', () => {
    it('extends the lease while the body runs, returns its result, releases, and leaves no timer', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      // A lease of 1 s, kept for 2.5 s: extended each time half of it is left, with room for a busy event loop.
      const lock = writeLock({ collection, locktimeout: 1_000 });
      const timersBefore = activeTimers();
      const result = await lock.using({ _id: 1 }, undefined, async (handle, signal) => {
        const granted = handle.expiresAt;
        for (const at of [750, 1_500, 2_250]) {
          await sleep(at - (Date.now() - handle.timestamp));
          expect((await rejectionOf(lock.acquire({ _id: 1 }))).subtype, `at ${at} ms`).to.equal('LockAlreadyTaken');
        }
        expect(signal.aborted).to.equal(false);
        expect(handle.expiresAt, 'extended past the first lease').to.be.greaterThan(granted);
        return 'done';
      });
      expect(result).to.equal('done');
      expect((await collection.findOne({ _id: 1 as never }))?.lock.tags.write).to.deep.equal([]);
      expect(activeTimers()).to.equal(timersBefore);
    });

    it('aborts the signal with the reason when the lock is lost, and reports the loss', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 120 });
      const error = await rejectionOf(
        lock.using({ _id: 1 }, {}, async (_handle, signal) => {
          await lock.release({ _id: 1 }); // someone force-releases it
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          throw signal.reason;
        }),
      );
      expect(isLockError(error)).to.equal(true);
      expect(['LockWasReacquired', 'LockNotFound']).to.include(error.subtype);
    });

    it('propagates the body\'s error, not a release failure', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const bodyError = new Error('body failed');
      const error = await rejectionOf(
        lock.using({ _id: 1 }, {}, async () => {
          await collection.deleteOne({ _id: 1 as never });
          throw bodyError;
        }),
      );
      expect(error).to.equal(bodyError);
      await collection.insertOne({ _id: 1 as never });
      expect(await lock.using({ _id: 1 }, {}, async () => collection.deleteOne({ _id: 1 as never }).then(() => 'deleted'))).to.equal('deleted');
    });

    it('with `wait`, concurrent bodies on one document run one at a time', async function () {
      this.timeout(30_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({ collection, locktimeouts: { w: 1_000 }, lockRelationships: { w: { cooperative: ['w'] } } });
      let inside = 0;
      let most = 0;
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          lock.using({ _id: 1 }, { tag: 'w', wait: 20_000 }, async () => {
            inside++;
            most = Math.max(most, inside);
            await sleep(20);
            inside--;
            return i;
          }),
        ),
      );
      expect(results).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7]);
      expect(most).to.equal(1);
    });
  });
});

/*
 * The lease keeper of using() follows the lease the server keeps, also when the body extends its
 * own handle (handle.extend() defaults to the tag's lease, not the `locktimeout` using() was
 * called with). The defect guarded against: the keeper planned its timers from the lease it last
 * set itself, so after such an extension the server's lease was shorter than the keeper's plan,
 * nothing told the keeper, and the body's signal was not aborted when another client could (and
 * did) take the lock.
 */
describe('using() whose body extends its own handle', () => {
  it('handle.extend() without an argument inside using({ locktimeout: 4000 }) of a lock whose default lease is 1000 ms: the keeper replans, no second holder while the signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const jobs = writeLock({ collection, locktimeout: 1_000 });
    const other = writeLock({ collection, locktimeout: 1_000 });
    let abortedAt = 0;
    let otherAcquiredAt = 0;
    const holding = jobs.using({ _id: 1 }, { locktimeout: 4_000 }, async (handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await handle.extend(); // "make sure we have a full lease before the long step"
      // the long step: runs until the signal tells it to stop (or 3 s)
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 3_000);
      });
    });
    let settledAt = 0;
    void holding.finally(() => (settledAt = realNow())).catch(() => undefined);
    await sleep(50);
    const next = await other.acquire({ _id: 1 }, { wait: 5_000 });
    otherAcquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    // Either the keeper kept the lock (the other client got it only once using() had released it),
    // or the body's signal aborted before the other client got it.
    if (abortedAt === 0) expect(settledAt, 'using() released before the other client acquired').to.be.at.most(otherAcquiredAt);
    else expect(abortedAt, `the signal aborted ${Math.round(abortedAt - otherAcquiredAt)} ms after another client acquired the lock`).to.be.below(otherAcquiredAt);
  });
});

/*
 * The lease keeper of using() replans from the handle's expiry, which every extension's reply
 * updates (LockHandle.updateExpiry). Two extensions in flight at once (the keeper's, and the
 * body's own `handle.extend()`) can be applied by the server in one order and answered in the
 * other: the server keeps the expiry of the one applied last. The defect guarded against: the
 * handle kept the expiry of the one answered last, so when the body's shorter extension was
 * applied last but answered first, the handle (and the keeper) believed in the keeper's longer
 * lease; another client took the lock when the shorter one ended, while the body's signal was
 * still un-aborted.
 */
describe('two extensions in flight whose replies arrive in the other order: the handle follows the server', () => {
  it('using({ locktimeout: 4000 }) of a lock whose default lease is 1000 ms; the body extends while the keeper\'s extension reply is slow', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    // findOneAndUpdate #1 acquires, #2 is the keeper's extension (at about 2 s): its reply comes
    // back 400 ms late (the server applied it at once). #3 is the body's extension.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 2 ? 400 : 0) });
    const jobs = writeLock({ collection: slow, locktimeout: 1_000 });
    const other = writeLock({ collection, locktimeout: 1_000 });
    let abortedAt = 0;
    let serverExpiry = 0;
    let handleExpiry = 0;
    const start = realNow();
    const holding = jobs.using({ _id: 1 }, { locktimeout: 4_000 }, async (handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await sleep(2_150);
      await handle.extend(); // "a fresh lease before the next step" (the tag's lease: 1000 ms)
      await sleep(500); // the keeper's late reply has arrived meanwhile
      handleExpiry = handle.expiresAt;
      const doc = await collection.findOne({ _id: 1 as never });
      serverExpiry = (doc?.lock?.tags?.write?.[0]?.exp as Date | undefined)?.getTime() ?? 0;
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 4_000);
      });
    });
    let settledAt = 0;
    void holding.finally(() => (settledAt = realNow())).catch(() => undefined);
    await sleep(50);
    const next = await other.acquire({ _id: 1 }, { wait: 8_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    expect(handleExpiry, 'the handle never believes in a later expiry than the server keeps').to.be.at.most(serverExpiry);
    // Either the keeper kept the lock until using() released it, or the signal aborted first.
    if (abortedAt === 0) return void expect(settledAt, 'using() released before the other client acquired').to.be.at.most(acquiredAt);
    expect(
      abortedAt,
      `handle.expiresAt ${handleExpiry}, the server's ${serverExpiry} (${handleExpiry - serverExpiry} ms apart); ` +
        `another client acquired at +${Math.round(acquiredAt - start)} ms, the body's signal aborted at +${Math.round(abortedAt - start)} ms`,
    ).to.be.below(acquiredAt);
  });
});
