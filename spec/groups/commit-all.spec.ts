/**
 * commitAll with a member that has no update (null): that member is part of the group's critical
 * section too. If it was lost before the commits start, no update may be applied ("only if every
 * member is still held when it starts", using-all.ts), and whatever the call reports, `err.commits`
 * must say which updates landed.
 */
import { expect } from 'chai';
import { commitAll, usingAll, writeLock } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('commitAll: a member without an update that was lost', function () {
  this.timeout(30_000);

  it('rejects with err.commits telling that the other update landed', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 30_000 });
    const failed = await rejectionOf(
      usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async () => {
        await lock.release({ _id: 2 }); // forced by someone else: the member of request 1 is lost
        return commitAll([{ $inc: { n: 1 } }, null], 'done');
      }),
    );
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const landed = docs.map((doc) => doc.n);
    expect(failed.request, failed.message).to.equal(1);
    // Whatever the call decided about request 0's update, the caller must be told what became of it.
    expect(failed.commits, `the call rejected (${failed.message}) while the documents hold n = ${JSON.stringify(landed)}`).to.deep.equal([landed[0] === 1, null]);
  });

  it('applies no update when a member without one is held by someone else by the time the commits start', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 30_000 });
    const intruder = writeLock({ collection: accounts, locktimeout: 30_000 });
    let other: Awaited<ReturnType<typeof intruder.acquire>> | undefined;
    const failed = await rejectionOf(
      usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async () => {
        await lock.release({ _id: 2 }); // forced release (an operator, monglock v2 code) ...
        other = await intruder.acquire({ _id: 2 }); // ... and another holder takes document 2
        // The body decided its update of document 1 from document 2, which it believes it holds.
        return commitAll([{ $inc: { n: 1 } }, null], 'done');
      }),
    );
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => doc.n), `rejected with: ${failed.message}; document 2 was held by ${String(other?.id)} when document 1 was committed`).to.deep.equal([0, 0]);
    await other?.release();
  });
});
