/**
 * A replica set's failover with rollback (docs/guarantees.md, "Write concerns"): the writes the old
 * primary alone acknowledged after the majority commit point are lost. Simulated on one server
 * (spec/support/replica-set.ts): the documents go back to the state right after the last write
 * sent at majority. Plain releases go at `releaseW` (1): one rolled back leaves its lock held until
 * its lease ends, never two holders. A folded section may be acquired at `w: 1`: rolled back, its
 * commit (at majority) finds no lock and writes nothing, and its token may be issued again. What a
 * majority acknowledged (an acquisition, a commit) survives. The random sequences of
 * spec/protocol/protocol-model.spec.ts check the same with failovers anywhere.
 */
import { expect } from 'chai';
import { commit, writeLock } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';
import { ReplicaSet } from '../support/replica-set';

/** A collection with the document `a` (`n: 0`) on a simulated replica set. */
async function replicaSet(): Promise<ReplicaSet> {
  return ReplicaSet.over(await freshCollection([{ _id: 'a', n: 0 }]), ['a']);
}

describe('a failover that rolls back the writes acknowledged below majority', () => {
  it('a plain release rolled back leaves the lock held until its lease ends: the next acquisition is refused, then gets the lock', async function () {
    this.timeout(10_000);
    const replica = await replicaSet();
    const lock = writeLock({ collection: replica.collection, locktimeout: 2_000 });
    const held = await lock.acquire({ _id: 'a' });
    await held.release();
    expect(await replica.failover(), 'the release was lost').to.equal(true);
    const refused = await rejectionOf(lock.acquire({ _id: 'a' }));
    expect(refused.subtype).to.equal('LockAlreadyTaken');
    const next = await lock.acquire({ _id: 'a' }, { wait: 5_000 });
    expect(next.fence, 'a token never issued before').to.be.above(held.fence);
    expect(next.timestamp, 'once the lease of the lock held again had ended').to.be.at.least(held.expiresAt);
    await next.release();
  });

  it('a folded section acquired at w: 1 and rolled back: its commit writes nothing, and its token is issued again', async function () {
    this.timeout(10_000);
    const replica = await replicaSet();
    const lock = writeLock({ collection: replica.collection, locktimeout: 5_000 });
    let token = 0;
    const error = await rejectionOf(
      lock.using({ _id: 'a' }, { document: true, w: 1 }, async (handle) => {
        token = handle.fence;
        expect(await replica.failover(), 'the acquisition was lost').to.equal(true);
        return commit({ $inc: { n: 1 } });
      }),
    );
    expect(error.subtype, error.message).to.equal('LockNotFound');
    const doc = await replica.collection.findOne({ _id: 'a' as never });
    expect(doc?.n, 'the commit wrote nothing').to.equal(0);
    const next = await lock.acquire({ _id: 'a' });
    expect(next.fence, 'the rolled-back token is issued again').to.equal(token);
    await next.release();
  });

  it('what a majority acknowledged survives: a resolved commit and the lock acquired after it', async () => {
    const replica = await replicaSet();
    const lock = writeLock({ collection: replica.collection, locktimeout: 5_000 });
    await lock.using({ _id: 'a' }, { document: true }, async () => commit({ $inc: { n: 1 } }));
    const held = await lock.acquire({ _id: 'a' });
    expect(await replica.failover(), 'nothing was acknowledged below majority since').to.equal(false);
    expect((await replica.collection.findOne({ _id: 'a' as never }))?.n).to.equal(1);
    const refused = await rejectionOf(lock.acquire({ _id: 'a' }));
    expect(refused.subtype, 'the lock acquired at majority is still held').to.equal('LockAlreadyTaken');
    expect(held.remaining()).to.be.above(0);
    await held.release();
  });
});
