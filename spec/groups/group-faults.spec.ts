/**
 * Faults at every await of a group's acquisition: an abort while any of its commands is on the
 * way there or back, a reply lost past the call's deadline, a request that reaches the server
 * late. Whatever happens, the group rejects and, once the commands in flight have landed, none
 * of its documents is held.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { acquireAll, commitAll, isLockError, usingAll, writeLock } from '../../lib';
import { delayedCollection, type DelayPlan } from '../../stress/delayed-collection';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

/** Resolves once no document of `collection` has a lock entry (or throws after `ms`). */
async function untilNothingHeld(collection: Collection<Document>, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const held = await collection.countDocuments({ 'lock.tags.write.0': { $exists: true } });
    if (held === 0) return;
    if (Date.now() > until) throw new Error(`${held} document(s) still locked ${ms} ms after the group gave up`);
    await sleep(50);
  }
}

/** A plan that holds the `k`-th lock write (findOneAndUpdate) until `gate` resolves, and tells `reached`. */
function holdingCall(k: number, gate: Promise<unknown>, reached: () => void): DelayPlan {
  return (method, n) => {
    if (method !== 'findOneAndUpdate' || n !== k) return undefined;
    reached();
    return gate;
  };
}

describe('acquireAll under faults: nothing is left held', function () {
  this.timeout(120_000);

  for (const side of ['request', 'reply'] as const) {
    it(`an abort while the k-th lock command's ${side} is held back, for every k of a contended acquisition`, async () => {
      let completed = false;
      let aborted = 0;
      for (let k = 1; !completed && k <= 60; k++) {
        const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
        const other = writeLock({ collection: accounts, locktimeout: 10_000 });
        const holder = await other.acquire({ _id: 2 });
        setTimeout(() => void holder.release(), 150);
        let open!: () => void;
        const gate = new Promise<void>((resolve) => (open = resolve));
        const controller = new AbortController();
        const plan = holdingCall(k, gate, () => setTimeout(() => controller.abort(new Error(`abort at call ${k}`)), 20));
        const lock = writeLock({ collection: delayedCollection(accounts, { [side]: plan }), locktimeout: 10_000 });
        const outcome = acquireAll([{ lock, filter: { _id: 3 } }, { lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }], { wait: 10_000, signal: controller.signal }).then(
          (group) => ({ group }),
          (error: unknown) => ({ error }),
        );
        const settled = await outcome;
        open();
        if ('group' in settled) {
          // Call k never came: the acquisition was done before it.
          expect(controller.signal.aborted, `k = ${k}`).to.equal(false);
          await settled.group.release();
          completed = true;
        } else {
          expect((settled.error as Error).message, `k = ${k}`).to.equal(`abort at call ${k}`);
          aborted++;
        }
        await untilNothingHeld(accounts);
      }
      expect(completed, 'the last k is past the acquisition').to.equal(true);
      expect(aborted, 'a contended acquisition of three documents sends several lock commands').to.be.at.least(5);
    });
  }

  it('commitAll: a commit whose request reaches the server past its deadline is settled as not applied and never lands; the one before it landed', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    // The commit of document 2 (the update carrying `$inc`) travels 700 ms; the call's deadline is 300 ms.
    const late: DelayPlan = (method, _n, args) => (method === 'updateOne' && '$inc' in (args[1] as object) && JSON.stringify(args[0]).includes('"_id":2') ? 700 : undefined);
    const lock = writeLock({ collection: delayedCollection(accounts, { request: late }), locktimeout: 10_000, timeout: 300 });
    const failed = await rejectionOf(usingAll([{ lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }], {}, () => commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }])));
    expect(isLockError(failed, 'DbError'), failed.message).to.equal(true);
    expect(failed.request).to.equal(0);
    expect((failed.data as { applied?: unknown } | undefined)?.applied).to.equal(false);
    expect(failed.commits, 'in the order of the requests: document 2 not applied, document 1 landed').to.deep.equal([false, true]);
    await sleep(1_000); // the late request has reached the server by now
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length]), 'the late commit matched nothing; both released').to.deep.equal([[1, 0], [0, 0]]);
  });

  it('a lost reply (past the deadline) or a request that lands late, at every lock command: DbError, and nothing held once it landed', async () => {
    for (const side of ['request', 'reply'] as const) {
      for (let k = 1; k <= 3; k++) {
        const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
        const lost: DelayPlan = (method, n) => (method === 'findOneAndUpdate' && n === k ? 700 : undefined);
        const lock = writeLock({ collection: delayedCollection(accounts, { [side]: lost }), locktimeout: 10_000, timeout: 300 });
        const failed = await rejectionOf(acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }, { lock, filter: { _id: 3 } }]));
        expect(isLockError(failed, 'DbError'), `${side} ${k}: ${failed.message}`).to.equal(true);
        expect(failed.request, `${side} ${k}`).to.equal(k - 1);
        await untilNothingHeld(accounts);
      }
    }
  });
});
