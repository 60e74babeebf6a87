/**
 * Review 3: an assertive registration is not a held lock (README, Relationships: call
 * `acquire(filter, { lock })` again "until it resolves: then no unexpired `b` lock remains"),
 * yet the handle `AssertiveLock` carries (`err.lock`, with `document` when asked) takes
 * `release({ update })` and `extend({ update })`: LockEngine.release/extend check only that the
 * entry is present and unexpired (`entryLiveOnServer`), not that the tags it asserts over are
 * gone. So a write the caller folds into its "lock" lands while a holder of an asserted-over tag
 * is in its own read-modify-write, whose commit then overwrites it: a lost update.
 */
import { expect } from 'chai';
import { multiLock, type LockHandle } from '../lib';
import { freshCollection, rejectionOf } from './support/fixture';

describe('review 3 (fixed): a folded write from an assertive registration', () => {
  it('release({ update }) of a registration still waiting for the tag it asserts over is refused', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const locks = multiLock({
      collection,
      locktimeouts: { x: 5_000, y: 5_000 },
      lockRelationships: { x: { cooperative: ['x'], assertive: ['y'] }, y: { cooperative: ['x', 'y'] } },
    });
    const holder = await locks.acquire({ _id: 1 }, { tag: 'y', document: true }); // reads 100
    const registration = await rejectionOf(locks.acquire({ _id: 1 }, { tag: 'x', document: true }));
    expect(registration.subtype).to.equal('AssertiveLock');
    const pending = registration.lock as LockHandle;
    const folded = await pending.release({ update: { $inc: { balance: -50 } } }).then(
      () => 'applied',
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
    );
    // The holder of y finishes its read-modify-write: 100 - 30.
    await holder.release({ update: { $set: { balance: (holder.document?.balance as number) - 30 } } });
    const balance = (await collection.findOne({ _id: 1 as never }))?.balance;
    console.log(`      the registration's folded write: ${folded}; balance ${balance}`);
    expect(folded, 'a registration that still waits for y is not a lock to write under').to.match(/^refused/);
    expect(balance).to.equal(70);
  });
});
