/**
 * What a new user is told when a call is misused: each message names the mistake and what stays
 * true of the lock, so that nobody has to read the source to find out.
 */
import { expect } from 'chai';
import { multiLock, semaphore, writeLock } from '../../lib';
import { failureOf, freshCollection, newClient, rejectionOf } from '../support/fixture';

describe('misuse messages', () => {
  it('a Promise where a handle belongs (a forgotten `await`) is refused with a TypeError that says so, and the lock stays held', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection });
    const pending = lock.acquire({ _id: 'a' });
    const error = await failureOf(() => lock.release({ _id: 'a' }, { lock: pending as never }));
    expect(error).to.be.instanceOf(TypeError);
    expect(error.message).to.match(/`params\.lock`.*a Promise.*await/);
    const extended = await failureOf(() => lock.extend({ _id: 'a' }, { lock: pending as never }));
    expect(extended.message).to.match(/`params\.lock`.*a Promise.*await/);
    const handle = await pending;
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
    await handle.release();
    const tagged = multiLock({ collection, locktimeouts: { read: 5_000 } });
    const read = tagged.acquire({ _id: 'a' }, { tag: 'read' });
    expect((await failureOf(() => tagged.release({ _id: 'a' }, { lock: read as never }))).message).to.match(/a Promise.*await/);
    await (await read).release();
  });

  it('release() after client.close() says that nothing was sent and that the lock stays held until its lease ends', async () => {
    const client = await newClient();
    const raw = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection: client.db(raw.dbName).collection(raw.collectionName), locktimeout: 30_000 });
    const handle = await lock.acquire({ _id: 'a' });
    await client.close();
    const error = await rejectionOf(handle.release());
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/closed/);
    expect(error.message).to.match(/held until its lease ends/);
    expect((await rejectionOf(writeLock({ collection: raw }).acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
  });

  it('releasing twice says that this process already released the lock, not only that it is not held', async () => {
    const collection = await freshCollection([{ _id: 'a' }, { _id: 'b' }]);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 'a' });
    await handle.release();
    const again = await rejectionOf(handle.release());
    expect(again.subtype).to.equal('LockNotFound');
    expect(again.message).to.match(/already released/);
    const viaLock = await rejectionOf(lock.release({ _id: 'a' }, { lock: handle }));
    expect(viaLock.message, 'by the lock too').to.match(/already released/);
    const permits = semaphore({ collection, limit: 2 });
    const permit = await permits.acquire({ _id: 'b' });
    await permit.release();
    expect((await rejectionOf(permit.release())).message, 'a semaphore permit').to.match(/already released/);
  });

  it('a lock never held here is still only "not held"', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 'a' });
    await collection.updateOne({ _id: 'a' as never }, { $set: { 'lock.tags.write': [] } });
    const error = await rejectionOf(handle.release());
    expect(error.subtype).to.equal('LockNotFound');
    expect(error.message).not.to.match(/already released/);
  });

  it('wait: Infinity is accepted, as maxHold: Infinity is: the call waits until the lock is free', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection, locktimeout: 5_000 });
    const first = await lock.acquire({ _id: 'a' });
    const waiting = lock.acquire({ _id: 'a' }, { wait: Infinity });
    setTimeout(() => void first.release(), 300);
    const second = await waiting;
    expect(second.fence).to.be.above(first.fence);
    await second.release();
    const p = multiLock({ collection, locktimeouts: { read: 5_000 } });
    await (await p.using({ _id: 'a' }, { tag: 'read', wait: Infinity, maxHold: Infinity }, async (h) => h)).fence;
  });
});
