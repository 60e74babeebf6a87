/**
 * Review 3: the folded pattern's promise, README ("Read-modify-write in two commands", and
 * examples/folded.ts): "the release writes it, only if the lock is still held (else it rejects
 * and nothing is written)"; scoped-hold.ts: "any failure means it was not applied". A commit is
 * one updateOne; when its reply is lost (a dropped connection, a wtimeout at majority, the
 * client-side `timeout`), `using()` rejects with `DbError` although the server applied the
 * update and released the lock. A caller that trusts "rejected, so nothing was written" and runs
 * the section again applies it twice (here: two debits). Nothing tells the two cases apart:
 * the error says neither "may have been applied" nor carries anything to check it with.
 */
import { expect } from 'chai';
import { commit, writeLock } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection } from './support/fixture';

describe('review 3 (fixed): a commit whose reply is lost', () => {
  it('a commit that landed but whose reply was lost resolves (its id is read back), so nothing is debited twice', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc-1', balance: 100, history: [] }]);
    // The first updateOne (the commit) is applied; its reply comes back after the call's timeout.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'updateOne' && n === 1 ? 1_500 : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 5_000, timeout: 1_000 });
    const debit = (): Promise<number> =>
      accounts.using({ _id: 'acc-1' }, { wait: 2_000, document: { balance: 1 } }, (lock) => {
        const next = (lock.document?.balance as number) - 30;
        return commit({ $set: { balance: next }, $push: { history: -30 } }, next);
      });
    let attempts = 0;
    let error: (Error & { subtype?: string }) | undefined;
    for (;;) {
      attempts++;
      try {
        await debit();
        break;
      } catch (caught) {
        error ??= caught as Error & { subtype?: string };
        if (attempts === 2) break;
      }
    }
    console.log(`      first attempt: ${error?.message}`);
    const doc = await collection.findOne({ _id: 'acc-1' as never });
    // The commit landed: monglock reads its id back (lock.committed) and using() resolves, so no retry debits twice.
    expect({ attempts, balance: doc?.balance, history: doc?.history }, 'one debit of 30').to.deep.equal({ attempts: 1, balance: 70, history: [-30] });
  });
});
