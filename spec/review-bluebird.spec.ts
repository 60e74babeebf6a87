/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): bluebird runs a cancelled promise's onCancel handler asynchronously (in
 * its own queue, a setImmediate later), while the promise itself is cancelled at once. A reply
 * that is processed in between resolves the inner acquisition, whose handle bluebird then drops
 * (resolve() on a cancelled promise is ignored); the abort that would have released it comes
 * too late, after the acquisition already returned. The lock is held by nobody.
 */
import Bluebird from 'bluebird';
import { expect } from 'chai';
import { resourceLocks, writeLock } from '../lib';
import '../lib/bluebird';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from './support/fixture';

/** Keeps the event loop busy for `ms` (a slow request handler, a JSON.parse of a big body...). */
function busy(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end);
}

describe('review 1: bluebird cancellation racing with the reply releases what the reply brought', () => {
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
    const other = await writeLock({ collection }).acquire({ _id: 1 }).then((h) => h.release().then(() => 'acquired'), (e: Error & { subtype?: string }) => e.subtype);
    expect(other, 'the cancelled call holds nothing').to.equal('acquired');
  });
});
