/**
 * Quarantine of a lock taken with minHold (a run-once job that fails and quarantines its
 * document): the mark ends the hold, but the minimum hold stands. Once the mark ends (`until`, or
 * clearQuarantine) within the minimum hold, no other acquisition may win before timestamp + minHold.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, quarantine, writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';
import { isCommit, never } from '../support/lock-commands';

async function entriesOf(collection: Collection<Document>, _id: unknown): Promise<Document[]> {
  const doc = await collection.findOne({ _id } as Document);
  return ((doc?.lock as Document | undefined)?.tags as Document | undefined)?.write ?? [];
}

/** What another acquisition (no wait) gets. */
const outcomeOf = (acquisition: Promise<{ timestamp: number; release(): Promise<void> }>, first: number): Promise<string> =>
  acquisition.then(
    async (handle) => (await handle.release().catch(() => undefined), `acquired, stamped ${handle.timestamp - first} ms after the first`),
    (error: { subtype?: string; message?: string }) => `refused: ${error.subtype ?? error.message}`,
  );

describe('quarantine of a lock taken with minHold', function () {
  this.timeout(30_000);

  it('handle.quarantine with an until before the minimum hold ends: after the mark ends, others are still refused until the hold ends', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 20_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 10_000 });
    await held.quarantine({ reason: 'bad', until: new Date(Date.now() + 300) });
    expect(isLockError(await rejectionOf(lock.acquire({ _id: 1 })), 'Quarantined')).to.equal(true);
    await sleep(700);
    expect(await outcomeOf(lock.acquire({ _id: 1 }), held.timestamp)).to.equal('refused: LockAlreadyTaken');
    const kept = await entriesOf(collection, 1);
    expect(kept.map((entry) => entry.kept)).to.deep.equal([true]);
  });

  it('clearQuarantine right after: others are refused until the hold ends', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 20_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 10_000 });
    await held.quarantine({ reason: 'bad' });
    expect(await lock.clearQuarantine({ _id: 1 })).to.equal(true);
    expect(await outcomeOf(lock.acquire({ _id: 1 }), held.timestamp)).to.equal('refused: LockAlreadyTaken');
  });

  it('using() with minHold whose body returns quarantine(): cleared at once, others are still refused within the hold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 20_000 });
    let first = 0;
    const value = await lock.using({ _id: 1 }, { minHold: 10_000 }, (handle) => ((first = handle.timestamp), quarantine('bad', { value: 'q' })));
    expect(value).to.equal('q');
    expect(await lock.clearQuarantine({ _id: 1 })).to.equal(true);
    expect(await outcomeOf(lock.acquire({ _id: 1 }), first)).to.equal('refused: LockAlreadyTaken');
  });

  it('a quarantine of a minHold lock whose reply is lost is settled; cleared, the document stays taken until the hold ends', async () => {
    const collection = await freshCollection([{ _id: 1, state: 'new' }]);
    const lossy = delayedCollection(collection, { reply: (method, _n, args) => (isCommit(method, args) ? never : undefined) });
    const lock = writeLock({ collection: lossy, locktimeout: 20_000, timeout: 1_500 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 15_000 });
    const outcome = await held.quarantine({ reason: 'bad', update: { $set: { state: 'failed' } } }).then(
      () => 'resolved',
      (error: { subtype?: string; data?: { applied?: unknown } }) => `${error.subtype} applied=${String(error.data?.applied)}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    await writeLock({ collection }).clearQuarantine({ _id: 1 });
    const other = writeLock({ collection, locktimeout: 20_000 });
    expect({ outcome, state: doc?.state, second: await outcomeOf(other.acquire({ _id: 1 }), held.timestamp) }).to.deep.include({ second: 'refused: LockAlreadyTaken' });
  });
});
