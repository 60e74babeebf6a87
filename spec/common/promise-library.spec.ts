/**
 * Promise libraries (the `Promise` option; `monglock/bluebird` for the types): every method returns
 * the library's promises and the global Promise is never touched, and a bluebird promise cancelled
 * (or timed out) while its reply is being processed leaves nothing held.
 */
import * as Boom from '@hapi/boom';
import Bluebird from 'bluebird';
import { expect } from 'chai';
import { LockError, LockHandle, resourceLocks, writeLock } from '../../lib';
import '../../lib/bluebird';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';
import { whatAnAcquisitionGets } from '../support/lock-commands';

describe('promise libraries', () => {
  it('works in a bluebird chain that retries in the caller, without touching the global Promise', async () => {
    const nativePromise = Promise;
    const collection = await freshCollection([{ _id: 1 }]);
    // A lease long enough for a loaded machine's first call (a 100 ms one ran out before its reply came): the first holder lets go after 150 ms.
    const lock = writeLock({ collection, locktimeout: 10_000, boom: Boom });
    const first = await lock.acquire({ _id: 1 });
    setTimeout(() => void first.release(), 150);
    let retries = 0;
    const acquireWithRetry = (): Bluebird<LockHandle> =>
      Bluebird.resolve(lock.acquire({ _id: 1 })).catch(
        (error: unknown) => (error as { subtype?: string }).subtype === 'LockAlreadyTaken',
        () => {
          retries++;
          return Bluebird.delay(30).then(acquireWithRetry);
        },
      );
    const handle = await acquireWithRetry();
    expect(retries).to.be.greaterThan(0);
    expect(handle.fence).to.equal(2);
    expect(global.Promise).to.equal(nativePromise);
  });

  it('returns the promise library given as `Promise`', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, Promise: Bluebird });
    const pending = lock.acquire({ _id: 1 });
    expect(pending).to.be.instanceOf(Bluebird);
    const handle = await pending;
    expect(lock.release({ _id: 1 }, { lock: handle })).to.be.instanceOf(Bluebird);
    expect(writeLock({ collection }).acquire({ _id: 1 })).to.be.instanceOf(Promise).and.not.instanceOf(Bluebird);
  });

  it('bluebird promises from every method: .timeout(), .delay() and .catch(ErrorClass, fn) chains', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, Promise: Bluebird });
    const handle = await lock.acquire({ _id: 1 }).timeout(5_000).delay(10);
    const refused = await lock.acquire({ _id: 1 }).catch(LockError, (error) => error.subtype);
    expect(refused).to.equal('LockAlreadyTaken');
    expect(lock.extend({ _id: 1 }, { lock: handle })).to.be.instanceOf(Bluebird);
    expect(handle.extend(), 'handle.extend()').to.be.instanceOf(Bluebird);
    expect(handle.release(), 'handle.release()').to.be.instanceOf(Bluebird);
    expect(lock.using({ _id: 1 }, { wait: 1_000 }, async () => 1)).to.be.instanceOf(Bluebird);
  });
});

/*
 * Bluebird runs a cancelled promise's onCancel handler asynchronously (in its own queue, a
 * setImmediate later), while the promise itself is cancelled at once. A reply processed in between
 * resolves the inner acquisition, whose handle bluebird then drops (resolve() on a cancelled
 * promise is ignored). The defect guarded against: the abort that would have released it came too
 * late, after the acquisition had already returned, and the lock was held by nobody.
 */

/** Keeps the event loop busy for `ms` (a slow request handler, a JSON.parse of a big body...). */
function busy(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end);
}

describe('bluebird cancellation racing with the reply releases what the reply brought', () => {
  it('resourceLocks without ttl: xlock(...).timeout() rejects with TimeoutError and leaves nothing held', async function () {
    this.timeout(10_000);
    const Cancellable = Bluebird.getNewLibraryCopy();
    Cancellable.config({ cancellation: true });
    const collection = await freshCollection();
    // Replies of the lock's findOneAndUpdate come back 25 ms after the server executed it.
    const slow = delayedCollection(collection, { reply: (method) => (method === 'findOneAndUpdate' ? 25 : 0) });
    const locks = resourceLocks({ collection: slow, Promise: Cancellable });
    await (await locks.xlock('r', 'warm-up')).release(); // 'r' exists and is known to this client
    const pending = locks.xlock('r', 'gave-up').timeout(20);
    // The event loop is busy when both the timeout and the reply become due.
    setTimeout(() => busy(60), 5);
    const error = await rejectionOf(pending);
    expect(error).to.be.instanceOf(Bluebird.TimeoutError);
    await sleep(300);
    const held = await resourceLocks({ collection }).status({ resource: 'r' });
    expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'the timed-out call holds nothing').to.deep.equal([]);
  });

  it('writeLock: acquire(...).cancel() in the same event-loop turn as the reply leaves the document free', async function () {
    this.timeout(10_000);
    const Cancellable = Bluebird.getNewLibraryCopy();
    Cancellable.config({ cancellation: true });
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection: delayedCollection(collection, { reply: (method) => (method === 'findOneAndUpdate' ? 25 : 0) }), Promise: Cancellable, locktimeout: 10_000 });
    await (await lock.acquire({ _id: 1 })).release(); // warm: the connection is open
    const pending = lock.acquire({ _id: 1 });
    // The event loop is busy; when it is free again, the cancel (due at 20 ms) and the reply
    // (held until about 27 ms) are both due, in that order, in one turn of the event loop.
    setTimeout(() => busy(60), 5);
    setTimeout(() => pending.cancel(), 20);
    await sleep(300);
    expect(pending.isCancelled(), 'the caller cancelled').to.equal(true);
    const other = await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 });
    expect(other, 'the cancelled call holds nothing').to.equal('acquired');
  });
});
