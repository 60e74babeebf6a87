/**
 * usingAll and commitAll: a group's leases kept alive while a body runs, its signal aborted when a
 * member is lost, and each document's final update applied by its own release.
 */
import { expect } from 'chai';
import { commitAll, CommitAll, commit, isLockError, usingAll, writeLock, type LockGroup } from '../../lib';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

describe('usingAll(requests, params, body) and commitAll(updates, value)', function () {
  this.timeout(30_000);

  it('a transfer: both documents read with the acquisition, both updates applied by the releases, each record naming the group', async () => {
    const accounts = await freshCollection([{ _id: 'alice', balance: 100 }, { _id: 'bob', balance: 5 }]);
    const lock = writeLock({ collection: accounts });
    let group: LockGroup | undefined;
    const result = await usingAll([{ lock, filter: { _id: 'bob' } }, { lock, filter: { _id: 'alice' } }], { document: { balance: 1 } }, (held, signal) => {
      group = held;
      expect(signal.aborted).to.equal(false);
      const [to, from] = held;
      expect([from!.document!.balance, to!.document!.balance]).to.deep.equal([100, 5]);
      const made = commitAll([{ $inc: { balance: 30 } }, { $inc: { balance: -30 } }], 'moved');
      expect(made).to.be.instanceOf(CommitAll);
      return made;
    });
    expect(result).to.equal('moved');
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => doc.balance)).to.deep.equal([70, 35]);
    for (const doc of docs) {
      expect(doc.lock.tags.write).to.deep.equal([]);
      expect(doc.lock.committed.map((record: { group: string }) => record.group)).to.deep.equal([group!.id]);
    }
  });

  it('one member refused at its commit: the members before it in canonical order landed, the rest did not; err.request and err.commits say which', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }, { _id: 3, n: 0 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 30_000 });
    const failed = await rejectionOf(
      usingAll([{ lock, filter: { _id: 3 } }, { lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }], {}, async () => {
        await lock.release({ _id: 2 }); // forced by someone else: the member of request 1 is lost
        return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }, { $inc: { n: 1 } }]);
      }),
    );
    expect(failed.subtype).to.equal('LockNotFound');
    expect(failed.request).to.equal(1);
    expect(failed.commits, 'in the order of the requests: 1 landed (first in canonical order), 2 refused, 3 not applied').to.deep.equal([false, false, true]);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => doc.n)).to.deep.equal([1, 0, 0]);
    expect(docs.map((doc) => doc.lock.tags.write.length), 'every member released').to.deep.equal([0, 0, 0]);
  });

  it('a member lost while the body runs aborts the body signal; what the body returns is not applied, and every member is released', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 600 });
    const failed = await rejectionOf(
      usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async (_group, signal) => {
        await lock.release({ _id: 2 });
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }]);
      }),
    );
    expect(isLockError(failed)).to.equal(true);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => doc.n)).to.deep.equal([0, 0]);
    expect(docs.map((doc) => doc.lock.tags.write.length)).to.deep.equal([0, 0]);
  });

  it('keeps every lease alive past its length while the body runs', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 1_000 });
    const seen = await usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async (group, signal) => {
      await sleep(2_500);
      expect(signal.aborted).to.equal(false);
      return group.map((handle) => handle.remaining() > 0);
    });
    expect(seen).to.deep.equal([true, true]);
  });

  it('maxHold: the signal aborts with MaxHoldExceeded and every member is released at once', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 10_000 });
    const failed = await rejectionOf(
      usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], { maxHold: 300 }, async (_group, signal) => {
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        // Released when maxHold passed, before the body returned (in the background: waited for, up to 5 s).
        const until = Date.now() + 5_000;
        let held = [1, 1];
        while (held.some((n) => n > 0) && Date.now() < until) {
          held = (await accounts.find().sort({ _id: 1 }).toArray()).map((doc) => doc.lock.tags.write.length as number);
          if (held.some((n) => n > 0)) await sleep(20);
        }
        expect(held, 'released when maxHold passed, before the body returned').to.deep.equal([0, 0]);
        return 'late';
      }),
    );
    expect(failed.subtype).to.equal('MaxHoldExceeded');
  });

  it('bad commits are refused before any is written: the wrong count, an update of the lock field, a single-document commit(), bare update documents without commitAll()', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    const lock = writeLock({ collection: accounts });
    const requests = [{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }] as const;
    expect((await rejectionOf(usingAll(requests, {}, () => commitAll([{ $inc: { n: 1 } }])))).message).to.match(/one update \(or null\) per request, 2 in all/);
    expect((await rejectionOf(usingAll(requests, {}, () => commitAll([{ $inc: { n: 1 } }, { $set: { 'lock.x': 1 } }])))).message).to.match(/updates\[1\]/);
    expect((await rejectionOf(usingAll(requests, {}, () => commit({ $inc: { n: 1 } })))).message).to.match(/commitAll/);
    const bare = await rejectionOf(usingAll(requests, {}, () => [{ $inc: { n: 1 } }, { $inc: { n: 1 } }]));
    expect(bare.message, 'update documents returned without commitAll()').to.match(/return `commitAll\(\[update, …\], value\)`.*nothing was written, and every lock was released/);
    expect((await rejectionOf(usingAll(requests, { maxHlod: 5 } as never, () => 1))).message).to.match(/Did you mean `maxHold`/);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length])).to.deep.equal([[0, 0], [0, 0]]);
    // null: no update for that member.
    await usingAll(requests, {}, () => commitAll([null, { $inc: { n: 5 } }]));
    expect((await accounts.find().sort({ _id: 1 }).toArray()).map((doc) => doc.n)).to.deep.equal([0, 5]);
  });
});
