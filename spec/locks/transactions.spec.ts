/**
 * A commit, release or extension inside the caller's transaction (`session`): it joins the
 * transaction, is applied with it only if the lock is still held, MongoDB's own errors are passed
 * on unchanged (so that `withTransaction` retries what it should), and the lock is released
 * whether the transaction commits or aborts. Acquisitions never join one. `using()` run inside the
 * transaction sends nothing that waits for it, whichever way its body wrote the lock there.
 *
 * No backend here runs transactions (the offline server has no sessions): what monglock controls
 * is checked at the driver's API, by the collection of spec/support/transactional.ts, which
 * records every call and simulates the transaction (an abort, the writes held behind it).
 */
import { expect } from 'chai';
import { MongoServerError, type ClientSession, type Collection, type Document } from 'mongodb';
import { commit, isLockError, multiLock, resourceLocks, writeLock, type LockData, type LockHandle, type WriteLock } from '../../lib';
import { failingAfterLanding } from '../../stress/server-faults';
import { freshCollection, mongoClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';
import { liveEntries, transactional, transactionPerTest, until, type Call, type InTransaction } from '../support/transactional';

const DEBIT = { $inc: { balance: -30 } };

/** A writeLock on `{ _id: 'acc', balance: 100 }` through {@link transactional}: its writes in the transaction have `fate`. */
async function accountsIn(fate: InTransaction, options: { locktimeout?: number; timeout?: number } = {}): Promise<{ raw: Collection<Document>; calls: Call[]; lock: WriteLock }> {
  const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
  const calls: Call[] = [];
  return { raw, calls, lock: writeLock({ collection: transactional(raw, calls, () => fate), locktimeout: 5_000, ...options }) };
}

async function balance(raw: Collection<Document>): Promise<unknown> {
  return (await raw.findOne({ _id: 'acc' as never }))?.balance;
}

describe('a commit inside the caller\'s transaction', () => {
  const current = transactionPerTest();
  let session: ClientSession;
  beforeEach(() => {
    session = current();
  });

  it('lock outside, commit inside: only the commit carries the session (no write concern of its own), then the release runs outside it', async () => {
    const { raw, calls, lock: accounts } = await accountsIn('commit');
    const value = await accounts.using({ _id: 'acc' }, { document: { balance: 1 } }, (held) => commit(DEBIT, held.document?.balance, { session }));
    expect(value).to.equal(100);
    await session.commitTransaction();
    await until(async () => calls.filter((call) => call.method === 'updateOne').length >= 2);
    const writes = calls.filter((call) => call.method !== 'aggregate');
    expect(writes[0], 'the acquisition').to.deep.include({ method: 'findOneAndUpdate', session: false, w: 'majority' });
    expect(writes[1], 'the commit').to.deep.include({ method: 'updateOne', inTransaction: true, w: undefined });
    expect(writes[2], 'the release after the transaction').to.deep.include({ method: 'updateOne', session: false });
    expect(await balance(raw)).to.equal(70);
    expect(await liveEntries(raw, 'acc')).to.equal(0);
  });

  it('a transaction that aborts: its commit is not applied, and the lock is released all the same', async () => {
    const { raw, lock: accounts } = await accountsIn('abort', { locktimeout: 30_000 });
    // The body releases inside the transaction itself (lock outside, commit inside); using() sends no release of its own.
    await accounts.using({ _id: 'acc' }, {}, async (held) => {
      await held.release({ update: DEBIT, session });
    });
    await session.abortTransaction();
    await until(async () => (await liveEntries(raw, 'acc')) === 0);
    expect(await liveEntries(raw, 'acc'), 'released long before its 30 s lease').to.equal(0);
    expect(await balance(raw), 'the aborted commit').to.equal(100);
  });

  it("MongoDB's error inside the transaction is passed on as it is (withTransaction retries a TransientTransactionError), and nothing is settled inside it", async () => {
    const conflict = new MongoServerError({ ok: 0, code: 112, codeName: 'WriteConflict', errmsg: 'write conflict (simulated)', errorLabels: ['TransientTransactionError'] });
    const { raw, calls, lock: accounts } = await accountsIn(() => conflict, { locktimeout: 30_000 });
    const error = await rejectionOf(accounts.using({ _id: 'acc' }, {}, () => commit(DEBIT, 'x', { session })));
    expect(error, 'the driver error itself').to.equal(conflict);
    expect(conflict.hasErrorLabel('TransientTransactionError')).to.equal(true);
    expect(calls.filter((call) => call.inTransaction), 'one write in the transaction: no settling one').to.have.length(1);
    await until(async () => (await liveEntries(raw, 'acc')) === 0);
    expect(await liveEntries(raw, 'acc'), 'using() released the lock outside the transaction').to.equal(0);
    expect(await balance(raw)).to.equal(100);
  });

  it('an extension in the transaction carries the session; the handle keeps the lease it had (the new one counts only once the transaction commits)', async () => {
    const { calls, lock: accounts } = await accountsIn('commit');
    const handle = await accounts.acquire({ _id: 'acc' });
    const before = handle.expiresAt;
    await sleep(20);
    await handle.extend(60_000, { update: { $inc: { balance: 1 } }, session });
    expect(handle.expiresAt).to.equal(before);
    expect(calls.at(-1)).to.deep.include({ method: 'findOneAndUpdate', inTransaction: true, w: undefined });
    await session.commitTransaction();
    await handle.release();
  });

  it('a commit in the transaction after the lock ran out and another caller took it: LockWasReacquired, and nothing is applied when the transaction commits', async () => {
    const { raw, lock: accounts } = await accountsIn('commit', { locktimeout: 300 });
    const held = await accounts.acquire({ _id: 'acc' });
    await sleep(600);
    const rival = await writeLock({ collection: raw }).acquire({ _id: 'acc' });
    const error = await rejectionOf(held.release({ update: DEBIT, session }));
    await session.commitTransaction();
    expect(isLockError(error, 'LockWasReacquired'), `${error.name}: ${error.message}`).to.equal(true);
    expect(await balance(raw)).to.equal(100);
    await rival.release();
  });

  it('a session outside a transaction: a commit whose reply was lost is settled by a majority read all the same', async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const calls: Call[] = [];
    const lostOnce = failingAfterLanding(transactional(raw, calls, () => 'commit'), (method, args, n) => method === 'updateOne' && n === 1, () => new MongoServerError({ ok: 0, code: 91, codeName: 'ShutdownInProgress', errmsg: 'the retry failed (simulated)' }));
    const outside = mongoClient().startSession();
    try {
      const value = await writeLock({ collection: lostOnce }).using({ _id: 'acc' }, {}, () => commit(DEBIT, 'paid', { session: outside }));
      expect(value, 'the commit landed: settled as applied').to.equal('paid');
      const settlingRead = calls.filter((call) => call.method === 'aggregate').at(-1);
      expect(settlingRead, 'the read that settled it').to.deep.include({ session: true, inTransaction: false, readConcern: 'majority' });
      expect(await balance(raw)).to.equal(70);
    } finally {
      await outside.endSession();
    }
  });

  it('acquisitions refuse a session, and a session must be one: TypeError before anything is written', async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const locks = await freshCollection();
    const accounts = writeLock({ collection: raw, locktimeout: 5_000 });
    const rw = multiLock({ collection: raw, locktimeouts: { read: 5_000 } });
    const resources = resourceLocks({ collection: locks });
    const before = await snapshotOf(raw);
    for (const call of [
      () => accounts.acquire({ _id: 'acc' }, { session } as never),
      () => accounts.using({ _id: 'acc' }, { session } as never, () => undefined),
      () => rw.acquire({ _id: 'acc' }, { tag: 'read', session } as never),
    ]) {
      const error = await rejectionOf(Promise.resolve().then(call));
      expect(error).to.be.instanceOf(TypeError);
      expect(error.message).to.match(/lock outside the transaction/);
    }
    const notASession = await rejectionOf(accounts.release({ _id: 'acc' }, { timestamp: 1, session: { id: 1 } } as never));
    expect(notASession.message).to.match(/`params.session` to be a driver session/);
    expect(() => commit({ $set: { a: 1 } }, 1, { session: 'no' as never })).to.throw(TypeError, /`options.session` to be a driver session/);
    expect(await snapshotOf(raw), 'nothing written').to.equal(before);
    const held = await resources.xlock('r', 'me');
    const refused = await rejectionOf(held.release({ session } as never));
    expect(refused.message).to.match(/nor joins a transaction/);
    expect(isLockError(refused)).to.equal(false);
    await held.release();
  });
});

/** The ways a `using()` body writes its lock in the caller's transaction, each with `DEBIT`. */
const WRITES_IN_TRANSACTION: ReadonlyArray<{ readonly name: string; readonly write: (lock: WriteLock, held: LockHandle, session: ClientSession) => Promise<unknown> }> = [
  { name: 'handle.release({ update, session })', write: (_lock, held, session) => held.release({ update: DEBIT, session }) },
  { name: 'lock.release(filter, { lock: handle, update, session })', write: (lock, held, session) => lock.release({ _id: 'acc' }, { lock: held, update: DEBIT, session }) },
  { name: "lock.release(filter, { lock: the handle's JSON, update, session })", write: (lock, held, session) => lock.release({ _id: 'acc' }, { lock: JSON.parse(JSON.stringify(held)) as LockData, update: DEBIT, session }) },
  { name: 'handle.extend(ms, { update, session })', write: (_lock, held, session) => held.extend(60_000, { update: DEBIT, session }) },
  { name: "lock.extend(filter, { lock: the handle's JSON, locktimeout, update, session })", write: (lock, held, session) => lock.extend({ _id: 'acc' }, { lock: JSON.parse(JSON.stringify(held)) as LockData, locktimeout: 60_000, update: DEBIT, session }) },
];

describe("using() inside the caller's transaction", () => {
  const current = transactionPerTest();

  for (const { name, write } of WRITES_IN_TRANSACTION) {
    for (const fate of ['commit', 'abort'] as const) {
      it(`${name} in the body, then the transaction ${fate === 'commit' ? 'commits' : 'aborts'}: using() resolves while it is open, and one release outside it ends the lock`, async () => {
        const session = current();
        const { raw, calls, lock } = await accountsIn(fate, { timeout: 3_000 });
        const outcome = await lock.using({ _id: 'acc' }, {}, async (held) => {
          await write(lock, held, session);
          return 'done';
        }).catch((error: unknown) => error);
        const outside = (): Call[] => calls.filter((call) => call.method === 'updateOne' && !call.session);
        expect(outcome, `using() settled with ${String(outcome)}; releases sent outside the open transaction: ${outside().length}`).to.equal('done');
        await (fate === 'commit' ? session.commitTransaction() : session.abortTransaction());
        await until(async () => (await liveEntries(raw, 'acc')) === 0);
        expect(await liveEntries(raw, 'acc'), 'released after the transaction, long before its 60 s lease').to.equal(0);
        expect(await balance(raw)).to.equal(fate === 'commit' ? 70 : 100);
        expect(outside(), 'releases outside the transaction').to.have.length(1);
      });
    }
  }

  it('the body released the lock in the transaction: the lease keeper stops, and the body\'s signal is not aborted after it', async () => {
    const session = current();
    const { calls, lock } = await accountsIn('commit', { locktimeout: 300 });
    const seen = await lock.using({ _id: 'acc' }, {}, async (held, signal) => {
      await held.release({ update: DEBIT, session });
      const sent = calls.length;
      await sleep(600); // twice the lease: the keeper would have extended it, and judged it ended
      await session.commitTransaction(); // the body's own transaction ends (its withTransaction returns)
      await sleep(100);
      return { aborted: signal.aborted, extensions: calls.slice(sent).filter((call) => call.method === 'findOneAndUpdate').length };
    });
    expect(seen).to.deep.equal({ aborted: false, extensions: 0 });
  });

  it("the body extended the lock in the transaction and outlives the lease it had: the keeper's extension waits for the transaction, the body's signal aborts when that lease may end, using() resolves without waiting for the extension, and the lock ends after the transaction", async () => {
    const session = current();
    // A minute to settle each call: waiting for the extension held behind the transaction would outlast the test.
    const { raw, calls, lock } = await accountsIn('commit', { locktimeout: 300, timeout: 60_000 });
    const reason = await lock.using({ _id: 'acc' }, {}, async (held, signal) => {
      await held.extend(60_000, { session });
      await sleep(600); // twice the lease it had: the keeper extends it (outside the transaction), then judges it may have ended
      return signal.reason as unknown;
    });
    const extensions = calls.slice(calls.findIndex((call) => call.inTransaction) + 1).filter((call) => call.method === 'findOneAndUpdate');
    expect(isLockError(reason, 'LockNotFound'), String(reason)).to.equal(true);
    expect(extensions, "the keeper's extension, still held behind the transaction").to.have.length(1);
    expect(extensions[0]?.settled).to.equal(undefined);
    await session.commitTransaction();
    await until(async () => (await liveEntries(raw, 'acc')) === 0);
    expect(await liveEntries(raw, 'acc'), 'released after the transaction, long before its 60 s lease').to.equal(0);
  });
});
