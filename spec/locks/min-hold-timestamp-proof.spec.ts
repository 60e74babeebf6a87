/**
 * A lock taken with minHold, named by a monglock v2 bare `timestamp` proof (writeLock's
 * `release(filter, { timestamp })` and `extend(filter, { timestamp })`): the kept entry keeps its
 * `at`, so a timestamp proof must not find it (it is no hold), and a release by timestamp before
 * the minimum hold ends must not end it.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';

async function entriesOf(collection: Collection<Document>, _id: unknown): Promise<Document[]> {
  const doc = await collection.findOne({ _id } as Document);
  return ((doc?.lock as Document | undefined)?.tags as Document | undefined)?.write ?? [];
}

describe('minHold and monglock v2 timestamp proofs', () => {
  it('a kept entry is no hold for a timestamp proof: extend by timestamp is refused and the entry still ends at its minimum hold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 2_000 });
    await held.release();
    const extended = await lock.extend({ _id: 1 }, { timestamp: held.timestamp }).then(
      () => 'extended',
      (error: { subtype?: string }) => (['LockNotFound', 'LockWasReacquired'].includes(error.subtype ?? '') ? 'refused' : String(error)),
    );
    const [entry] = await entriesOf(collection, 1);
    expect({ extended, exp: entry?.exp.getTime() }, 'the kept entry is not extended past its minimum hold').to.deep.equal({ extended: 'refused', exp: held.timestamp + 2_000 });
  });

  it('a kept entry is no hold for a timestamp proof: a commit by timestamp is refused, its update not applied', async () => {
    const collection = await freshCollection([{ _id: 1, n: 0 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    await held.release();
    const outcome = await lock.release({ _id: 1 }, { timestamp: held.timestamp, update: { $inc: { n: 1 } } }).then(
      () => 'committed',
      (error: { subtype?: string }) => (['LockNotFound', 'LockWasReacquired'].includes(error.subtype ?? '') ? 'refused' : String(error)),
    );
    expect({ outcome, n: (await collection.findOne({ _id: 1 } as Document))!.n }).to.deep.equal({ outcome: 'refused', n: 0 });
  });

  it('a release by timestamp before the minimum hold ends does not end it: the job cannot run again within minHold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    await lock.release({ _id: 1 }, { timestamp: held.timestamp }).catch(() => undefined);
    const second = await lock.acquire({ _id: 1 }).then(
      async (handle) => (await handle.release(), `acquired ${handle.timestamp - held.timestamp} ms after the first`),
      (error: { subtype?: string }) => error.subtype,
    );
    expect(second).to.equal('LockAlreadyTaken');
  });
});
