/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): monglock v2 bare-timestamp proofs. release() refuses a timestamp that two
 * locks share (lock.recent), but extend() does not check it: a stale holder's extend by
 * timestamp succeeds on the next holder's lock taken in the same ms, and the stale holder is told
 * it holds the lock.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { freshCollection, rejectionOf } from './support/fixture';

describe('review 1: writeLock.extend with a v2 timestamp shared by two locks', () => {
  it('after a forced release, the old holder extending by its timestamp must be refused, not extend the new holder\'s lock', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const first = await lock.acquire({ _id: 1 }); // worker A (v2 code: keeps first.timestamp)
    await lock.release({ _id: 1 }); // an operator's forced release (v2: no proof)
    const second = await lock.acquire({ _id: 1 }); // worker B
    // Two acquisitions stamped in one ms happen on a fast server; make it so whatever this
    // machine's speed: B's lock and both stamps in the ms of A's, as such a run stores them.
    const at = new Date(first.timestamp);
    await collection.updateOne({ _id: 1 as never }, { $set: { 'lock.tags.write.0.at': at, 'lock.recent.write': [at, at] } });
    // Sanity: release by this timestamp is refused as ambiguous (claim 6)...
    expect((await rejectionOf(lock.release({ _id: 1 }, { timestamp: first.timestamp }))).message).to.match(/cannot tell them apart/);
    // ...and so is extend by the same timestamp:
    const outcome = await lock.extend({ _id: 1 }, { timestamp: first.timestamp, locktimeout: 60_000 }).then(
      (handle) => `resolved: A now believes it holds the lock until ${new Date(handle.expiresAt).toISOString()}`,
      (error: Error & { subtype?: string }) => error.subtype,
    );
    const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write as Array<{ id: string; exp: Date }>;
    expect(stored.map((entry) => entry.id), 'B still holds').to.deep.equal([second.id]);
    expect(outcome, `A's stale extend; B's lock now expires in ${stored[0]!.exp.getTime() - Date.now()} ms`).to.be.oneOf(['LockWasReacquired', 'LockNotFound']);
  });
});
