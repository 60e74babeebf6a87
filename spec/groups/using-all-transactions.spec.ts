/**
 * usingAll() run inside the caller's transaction, whose body writes members there (a release, a
 * commit or an extension with `session`): usingAll sends nothing that waits for that transaction,
 * and every member is released once it ends, whether it commits or aborts. The transaction is
 * simulated by spec/support/transactional.ts (no backend here runs one); each account is in a
 * collection of its own, as that simulation holds every write outside an open transaction that
 * wrote its collection (MongoDB holds only those to the documents it wrote).
 */
import { expect } from 'chai';
import type { ClientSession, Collection, Document } from 'mongodb';
import { realNow } from '../support/clock';
import { commitAll, isLockError, usingAll, writeLock, type LockData, type LockGroup, type WriteLock } from '../../lib';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';
import { liveEntries, transactional, transactionPerTest, until, type Call } from '../support/transactional';

const DEBIT = { $inc: { balance: -30 } };
const CREDIT = { $inc: { balance: 30 } };

/** The ways a `usingAll()` body on accounts `a` and `b` writes in the caller's transaction, what it returns, and the balances after a commit and after an abort. */
const BODIES: ReadonlyArray<{
  readonly name: string;
  readonly body: (locks: readonly WriteLock[], group: LockGroup, session: ClientSession) => Promise<unknown>;
  readonly balances: { readonly commit: readonly number[]; readonly abort: readonly number[] };
}> = [
  {
    name: 'both members released with their updates (a transfer in the transaction)',
    body: async (_lock, [a, b], session) => {
      await a!.release({ update: DEBIT, session });
      await b!.release({ update: CREDIT, session });
      return 'done';
    },
    balances: { commit: [70, 30], abort: [100, 0] },
  },
  {
    name: "one member released by lock.release(filter, { lock: its handle's JSON, update, session })",
    body: async ([lock], [a], session) => {
      await lock!.release({ _id: 'a' }, { lock: JSON.parse(JSON.stringify(a)) as LockData, update: DEBIT, session });
      return 'done';
    },
    balances: { commit: [70, 0], abort: [100, 0] },
  },
  {
    name: 'one member extended with an update (handle.extend(ms, { update, session }))',
    body: async (_lock, [a], session) => {
      await a!.extend(60_000, { update: DEBIT, session });
      return 'done';
    },
    balances: { commit: [70, 0], abort: [100, 0] },
  },
  {
    name: 'one member released in the transaction, the other committed by commitAll([null, update]) outside it',
    body: async (_lock, [a], session) => {
      await a!.release({ update: DEBIT, session });
      return commitAll([null, CREDIT], 'done');
    },
    balances: { commit: [70, 30], abort: [100, 30] },
  },
];

/** Accounts `a` (balance 100) and `b` (0), each in a collection of its own, through {@link transactional}: their writes in the transaction have `fate`. */
async function accounts(fate: 'commit' | 'abort', options: { locktimeout?: number; timeout?: number } = {}): Promise<{ raws: Array<Collection<Document>>; calls: Call[]; locks: WriteLock[]; requests: Array<{ lock: WriteLock; filter: Document }> }> {
  const raws = [await freshCollection([{ _id: 'a', balance: 100 }]), await freshCollection([{ _id: 'b', balance: 0 }])];
  const calls: Call[] = [];
  // 3 s to settle each call: a release held behind the open transaction fails after it.
  const locks = raws.map((raw) => writeLock({ collection: transactional(raw, calls, () => fate), locktimeout: 5_000, timeout: 3_000, ...options }));
  return { raws, calls, locks, requests: locks.map((lock, i) => ({ lock, filter: { _id: ['a', 'b'][i] } })) };
}

async function balances(raws: Array<Collection<Document>>): Promise<unknown[]> {
  return Promise.all(raws.map(async (raw) => (await raw.findOne())?.balance));
}

async function live(raws: Array<Collection<Document>>): Promise<number[]> {
  return [await liveEntries(raws[0]!, 'a'), await liveEntries(raws[1]!, 'b')];
}

describe("usingAll() inside the caller's transaction", function () {
  this.timeout(30_000);
  const current = transactionPerTest();

  for (const { name, body, balances: expected } of BODIES) {
    for (const fate of ['commit', 'abort'] as const) {
      it(`${name}, then the transaction ${fate === 'commit' ? 'commits' : 'aborts'}: usingAll() resolves while it is open, and one release per member outside it ends every lock`, async () => {
        const session = current();
        const { raws, calls, locks, requests } = await accounts(fate);
        const outcome = await usingAll(requests, {}, (group) => body(locks, group, session)).catch((error: unknown) => error);
        const outside = (): Call[] => calls.filter((call) => call.method === 'updateOne' && !call.session);
        expect(outcome, `usingAll() settled with ${String(outcome)}; releases sent outside the open transaction: ${outside().length}`).to.equal('done');
        await (fate === 'commit' ? session.commitTransaction() : session.abortTransaction());
        await until(async () => (await live(raws)).every((entries) => entries === 0));
        expect(await live(raws), 'released after the transaction, long before their 60 s leases').to.deep.equal([0, 0]);
        expect(await balances(raws)).to.deep.equal(expected[fate]);
        expect(outside(), 'releases outside the transaction, one per member').to.have.length(2);
      });
    }
  }

  it("the body released every member in the transaction: the keepers stop, and the body's signal is not aborted after it", async () => {
    const session = current();
    const { calls, requests } = await accounts('commit', { locktimeout: 300 });
    const seen = await usingAll(requests, {}, async ([a, b], signal) => {
      await a!.release({ update: DEBIT, session });
      await b!.release({ update: CREDIT, session });
      const sent = calls.length;
      await sleep(600); // twice the lease: the keepers would have extended it, and judged it ended
      await session.commitTransaction(); // the body's own transaction ends
      await sleep(100);
      return { aborted: signal.aborted, extensions: calls.slice(sent).filter((call) => call.method === 'findOneAndUpdate').length };
    });
    expect(seen).to.deep.equal({ aborted: false, extensions: 0 });
  });

  it("the body extended a member in the transaction and outlives the lease it had: the keeper's extension waits for the transaction, the body's signal aborts, usingAll() rejects without waiting for that extension, and every lock ends after the transaction", async () => {
    const session = current();
    // A minute to settle each call: waiting for the extension held behind the transaction would outlast the test.
    const { raws, calls, requests } = await accounts('commit', { locktimeout: 300, timeout: 60_000 });
    const started = realNow();
    const failed = await rejectionOf(
      usingAll(requests, {}, async ([a], signal) => {
        await a!.extend(60_000, { session });
        await sleep(600); // twice the lease it had: the keeper extends it (outside the transaction), then judges it may have ended
        expect(signal.aborted).to.equal(true);
        return 'done';
      }),
    );
    expect(isLockError(failed, 'LockNotFound'), String(failed)).to.equal(true);
    expect(realNow() - started, 'no wait for the held extension').to.be.below(5_000);
    const extensions = calls.slice(calls.findIndex((call) => call.inTransaction) + 1).filter((call) => call.method === 'findOneAndUpdate' && !call.settled);
    expect(extensions, "the keeper's extension, still held behind the transaction").to.have.length(1);
    await session.commitTransaction();
    await until(async () => (await live(raws)).every((entries) => entries === 0));
    expect(await live(raws), 'released after the transaction, long before its 60 s lease').to.deep.equal([0, 0]);
  });
});
