/**
 * Taking a lock from whoever holds it is said explicitly: `forceRelease(filter)` on every lock
 * kind. A writeLock's proof-less `release(filter)` is monglock v2's forced release and stays so by
 * default; a lock made with `forcedRelease: false` refuses it, naming `forceRelease(filter)`.
 */
import { expect } from 'chai';
import { multiLock, semaphore, writeLock } from '../../lib';
import { failureOf, freshCollection, rejectionOf, snapshotOf } from '../support/fixture';

describe('forced release', () => {
  it('with forcedRelease: false, a proof-less release is refused with a TypeError naming forceRelease(filter), and the lock stays held', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection, forcedRelease: false });
    const handle = await lock.acquire({ _id: 'a' });
    const before = await snapshotOf(collection);
    for (const call of [() => lock.release({ _id: 'a' }), () => lock.release({ _id: 'a' }, {})]) {
      const error = await failureOf(call);
      expect(error).to.be.instanceOf(TypeError);
      expect(error.message).to.match(/forceRelease\(filter\)/);
    }
    expect(await snapshotOf(collection), 'nothing written').to.equal(before);
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
    await lock.release({ _id: 'a' }, { lock: handle }); // a proof still releases
  });

  it('forceRelease(filter) takes a writeLock from its holder; without the option, release(filter) still does (v2)', async () => {
    const collection = await freshCollection([{ _id: 'a' }, { _id: 'b' }]);
    const strict = writeLock({ collection, forcedRelease: false });
    const held = await strict.acquire({ _id: 'a' });
    await strict.forceRelease({ _id: 'a' });
    const next = await strict.acquire({ _id: 'a' });
    expect(next.fence).to.be.above(held.fence);
    expect(['LockNotFound', 'LockWasReacquired']).to.include((await rejectionOf(held.release())).subtype);
    await next.release();
    const v2 = writeLock({ collection });
    await v2.acquire({ _id: 'b' });
    await v2.release({ _id: 'b' });
    await (await v2.acquire({ _id: 'b' })).release();
    expect((await rejectionOf(v2.forceRelease({ _id: 'missing' }))).subtype, 'no document').to.equal('RessourceNotFound');
  });

  it('multiLock.forceRelease(filter, { tag }) frees that tag only; semaphore.forceRelease(filter) frees every permit', async () => {
    const collection = await freshCollection([{ _id: 'a' }, { _id: 'b' }]);
    const rw = multiLock({ collection, locktimeouts: { read: 10_000, write: 10_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['read', 'write'] } } });
    await rw.acquire({ _id: 'a' }, { tag: 'read' });
    await rw.acquire({ _id: 'a' }, { tag: 'read' });
    expect((await rejectionOf(rw.acquire({ _id: 'a' }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');
    expect((await failureOf(() => rw.forceRelease({ _id: 'a' }, {} as never))).message).to.match(/`params\.tag`/);
    await rw.forceRelease({ _id: 'a' }, { tag: 'read' });
    await (await rw.acquire({ _id: 'a' }, { tag: 'write' })).release();
    const permits = semaphore({ collection, limit: 2 });
    await permits.acquire({ _id: 'b' });
    await permits.acquire({ _id: 'b' });
    expect((await rejectionOf(permits.acquire({ _id: 'b' }))).subtype).to.equal('SemaphoreFull');
    await permits.forceRelease({ _id: 'b' });
    await (await permits.acquire({ _id: 'b', }, { permits: 2 })).release();
  });

  it('the option and the method refuse what they do not know, before anything is written', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    expect(() => writeLock({ collection, forcedRelease: 'no' as never })).to.throw(TypeError, /`options\.forcedRelease`/);
    expect(() => writeLock({ collection, forceRelease: false } as never)).to.throw(TypeError, /forcedRelease/);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 'a' });
    expect((await failureOf(() => lock.forceRelease({ _id: 'a' }, { lock: handle } as never))).message).to.match(/`params\.lock`/);
    expect((await failureOf(() => lock.forceRelease({ _id: 'a' }, { update: { $set: { x: 1 } } } as never))).message).to.match(/`params\.update`/);
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
    await handle.release();
  });
});
