/**
 * Resource locks taken with minHold, then unlocked or renewed by their lock id (`unlock(lockId)`,
 * `renew(lockId, ttl)`), while still held: the lock id is the proof resource locks release and
 * renew by, so `unlock` is a release (it keeps the entry until the minimum hold ends, as the
 * handle's release does) and `renew` to a ttl shorter than minHold is refused before anything is
 * written (as a handle's extension is): neither may let another lock in before the minimum hold ends.
 */
import { expect } from 'chai';
import { resourceLocks } from '../../lib';
import { freshCollection, sleep } from '../support/fixture';

const outcomeOf = (acquisition: Promise<{ timestamp: number; release(): Promise<void> }>, first: number): Promise<string> =>
  acquisition.then(
    async (handle) => {
      await handle.release().catch(() => undefined);
      return `acquired, stamped ${handle.timestamp - first} ms after the first`;
    },
    (error: { subtype?: string; message?: string }) => `refused: ${error.subtype ?? error.message}`,
  );

describe('minHold on resource locks, unlocked or renewed by their lock id while held', () => {
  it('unlock(lockId) before the minimum hold ends keeps the entry: another xlock is refused until it ends', async () => {
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const held = await locks.xlock('report', 'job-1', { ttl: 20_000, minHold: 10_000 });
    await locks.unlock('job-1');
    expect(await outcomeOf(locks.xlock('report', 'job-2', { ttl: 20_000 }), held.timestamp)).to.equal('refused: LockAlreadyTaken');
  });

  it('renew(lockId, ttl) with a ttl shorter than minHold does not end the minimum hold early', async () => {
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const held = await locks.xlock('report', 'job-1', { ttl: 20_000, minHold: 10_000 });
    const renewed = await locks.renew('job-1', 300).then(
      () => 'renewed',
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.name}`,
    );
    await sleep(400);
    expect({ renewed, second: await outcomeOf(locks.xlock('report', 'job-2', { ttl: 20_000 }), held.timestamp) }).to.deep.include({ second: 'refused: LockAlreadyTaken' });
  });
});
