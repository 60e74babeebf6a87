/**
 * Review of the quarantine (issue 41 §3): an assertive registration made while an exclusive holder
 * of a tag it asserts over holds the document is continued after that holder quarantined it.
 */
import { expect } from 'chai';
import { isLockError, multiLock, type LockHandle } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('quarantine and assertive registrations', function () {
  this.timeout(30_000);

  /** x is exclusive (quarantinable); y asserts over x. A registration of y made while x is held. */
  async function registeredOverHolder() {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lock = multiLock({ collection, locktimeouts: { x: 10_000, y: 10_000 }, lockRelationships: { x: { cooperative: ['x'] }, y: { cooperative: ['y'], assertive: ['x'] } } });
    const holder = await lock.acquire({ _id: 'doc' }, { tag: 'x' });
    const registration = await rejectionOf(lock.acquire({ _id: 'doc' }, { tag: 'y' }));
    expect(isLockError(registration, 'AssertiveLock'), registration.message).to.equal(true);
    return { collection, lock, holder, registered: registration.lock as LockHandle };
  }

  it('a continuation (acquire with { lock }) after the holder quarantined the document is refused with Quarantined, holding nothing', async () => {
    const { collection, lock, holder, registered } = await registeredOverHolder();
    await holder.quarantine({ reason: 'poisoned' });
    expect(isLockError(await rejectionOf(lock.acquire({ _id: 'doc' }, { tag: 'x' })), 'Quarantined'), 'a new acquisition is refused').to.equal(true);
    const continued = await lock.acquire({ _id: 'doc' }, { lock: registered }).then(
      (handle) => `acquired ${handle.id}`,
      (error: Error) => (isLockError(error, 'Quarantined') ? 'Quarantined' : `${error.name}: ${error.message}`),
    );
    const doc = await collection.findOne({ _id: 'doc' as never });
    expect({ continued, mark: doc?.lock.quarantine?.reason }).to.deep.equal({ continued: 'Quarantined', mark: 'poisoned' });
  });

  it('a waiting assertive acquisition (wait) whose blocker quarantines the document is refused with Quarantined', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lock = multiLock({ collection, locktimeouts: { x: 10_000, y: 10_000 }, lockRelationships: { x: { cooperative: ['x'] }, y: { cooperative: ['y'], assertive: ['x'] } } });
    const holder = await lock.acquire({ _id: 'doc' }, { tag: 'x' });
    const waiting = lock.acquire({ _id: 'doc' }, { tag: 'y', wait: 10_000 }).then(
      (handle) => `acquired ${handle.id}`,
      (error: Error) => (isLockError(error, 'Quarantined') ? 'Quarantined' : `${error.name}: ${error.message}`),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await holder.quarantine({ reason: 'poisoned' });
    expect(await waiting).to.equal('Quarantined');
    const doc = await collection.findOne({ _id: 'doc' as never });
    expect(doc?.lock.tags.y ?? [], 'nothing held').to.deep.equal([]);
  });
});
