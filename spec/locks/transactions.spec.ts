/**
 * A commit, release or extension inside the caller's transaction (`session`): it joins the
 * transaction, is applied with it only if the lock is still held, MongoDB's own errors are passed
 * on unchanged (so that `withTransaction` retries what it should), and the lock is released
 * whether the transaction commits or aborts. Acquisitions never join one.
 *
 * No backend here runs transactions (the offline server has no sessions): what monglock controls
 * is checked at the driver's API, by a collection that records the session and write concern of
 * every call and forwards it without the session; a transaction that aborts is simulated by not
 * applying the writes made in it. What MongoDB then does is the manual's (docs/backends.md).
 */
import { expect } from 'chai';
import { MongoServerError, type ClientSession, type Collection, type Document } from 'mongodb';
import { commit, isLockError, multiLock, resourceLocks, writeLock } from '../../lib';
import { realNow } from '../support/clock';
import { freshCollection, mongoClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';

/** One driver call as monglock made it. */
interface Call {
  readonly method: string;
  readonly inTransaction: boolean;
  readonly session: boolean;
  readonly w: unknown;
}

/** What happens to a write made in the transaction: applied (it commits), dropped (it aborts), or failed with an error. */
type InTransaction = 'commit' | 'abort' | (() => Error);

/** `collection` whose calls are recorded and forwarded without their session (see the file's comment). */
function transactional(collection: Collection<Document>, calls: Call[], inTransaction: () => InTransaction): Collection<Document> {
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (!['findOneAndUpdate', 'updateOne', 'aggregate'].includes(method)) return (value as (...a: unknown[]) => unknown).bind(target);
      return (...args: unknown[]) => {
        const at = method === 'aggregate' ? 1 : 2;
        const { session, ...options } = (args[at] ?? {}) as { session?: ClientSession; writeConcern?: { w?: unknown } };
        const inside = session?.inTransaction() === true;
        calls.push({ method, inTransaction: inside, session: session !== undefined, w: options.writeConcern?.w });
        const forwarded = [...args.slice(0, at), options];
        if (inside && method !== 'aggregate') {
          const fate = inTransaction();
          if (fate === 'abort') return Promise.resolve({ acknowledged: true, matchedCount: 1, modifiedCount: 1, upsertedCount: 0, upsertedId: null });
          if (fate !== 'commit') return Promise.reject(fate());
        }
        return (value as (...a: unknown[]) => unknown).apply(target, forwarded);
      };
    },
  });
}

/** Unexpired lock entries of the document `_id`. */
async function liveEntries(collection: Collection<Document>, id: string): Promise<number> {
  const doc = await collection.findOne({ _id: id as never });
  return Object.values((doc?.lock?.tags ?? {}) as Record<string, Array<{ exp: Date }>>).flat().filter((entry) => entry.exp.getTime() > realNow()).length;
}

async function until(condition: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const deadline = realNow() + ms;
  while (!(await condition()) && realNow() < deadline) await sleep(20);
}

describe('a commit inside the caller\'s transaction', () => {
  let session: ClientSession;
  beforeEach(() => {
    session = mongoClient().startSession();
    session.startTransaction();
  });
  afterEach(async () => {
    if (session.inTransaction()) await session.abortTransaction().catch(() => undefined);
    await session.endSession().catch(() => undefined);
  });

  it('lock outside, commit inside: only the commit carries the session (no write concern of its own), then the release runs outside it', async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const calls: Call[] = [];
    const accounts = writeLock({ collection: transactional(raw, calls, () => 'commit'), locktimeout: 5_000 });
    const value = await accounts.using({ _id: 'acc' }, { document: { balance: 1 } }, (held) => commit({ $inc: { balance: -30 } }, held.document?.balance, { session }));
    expect(value).to.equal(100);
    await until(async () => calls.filter((call) => call.method === 'updateOne').length >= 2);
    const writes = calls.filter((call) => call.method !== 'aggregate');
    expect(writes[0], 'the acquisition').to.deep.include({ method: 'findOneAndUpdate', session: false, w: 'majority' });
    expect(writes[1], 'the commit').to.deep.include({ method: 'updateOne', inTransaction: true, w: undefined });
    expect(writes[2], 'the release after the transaction').to.deep.include({ method: 'updateOne', session: false });
    expect((await raw.findOne({ _id: 'acc' as never }))?.balance).to.equal(70);
    expect(await liveEntries(raw, 'acc')).to.equal(0);
  });

  it('a transaction that aborts: its commit is not applied, and the lock is released all the same', async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const calls: Call[] = [];
    const accounts = writeLock({ collection: transactional(raw, calls, () => 'abort'), locktimeout: 30_000 });
    // The body releases inside the transaction itself (lock outside, commit inside); using() sends no release of its own.
    await accounts.using({ _id: 'acc' }, {}, async (held) => {
      await held.release({ update: { $inc: { balance: -30 } }, session });
    });
    await until(async () => (await liveEntries(raw, 'acc')) === 0);
    expect(await liveEntries(raw, 'acc'), 'released long before its 30 s lease').to.equal(0);
    expect((await raw.findOne({ _id: 'acc' as never }))?.balance, 'the aborted commit').to.equal(100);
  });

  it("MongoDB's error inside the transaction is passed on as it is (withTransaction retries a TransientTransactionError), and nothing is settled inside it", async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const calls: Call[] = [];
    const conflict = new MongoServerError({ ok: 0, code: 112, codeName: 'WriteConflict', errmsg: 'write conflict (simulated)', errorLabels: ['TransientTransactionError'] });
    const accounts = writeLock({ collection: transactional(raw, calls, () => () => conflict), locktimeout: 30_000 });
    const error = await rejectionOf(accounts.using({ _id: 'acc' }, {}, () => commit({ $inc: { balance: -30 } }, 'x', { session })));
    expect(error, 'the driver error itself').to.equal(conflict);
    expect(conflict.hasErrorLabel('TransientTransactionError')).to.equal(true);
    expect(calls.filter((call) => call.inTransaction), 'one write in the transaction: no settling one').to.have.length(1);
    await until(async () => (await liveEntries(raw, 'acc')) === 0);
    expect(await liveEntries(raw, 'acc'), 'using() released the lock outside the transaction').to.equal(0);
    expect((await raw.findOne({ _id: 'acc' as never }))?.balance).to.equal(100);
  });

  it('an extension in the transaction carries the session; the handle keeps the lease it had (the new one counts only once the transaction commits)', async () => {
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const calls: Call[] = [];
    const accounts = writeLock({ collection: transactional(raw, calls, () => 'commit'), locktimeout: 5_000 });
    const handle = await accounts.acquire({ _id: 'acc' });
    const before = handle.expiresAt;
    await sleep(20);
    await handle.extend(60_000, { update: { $inc: { balance: 1 } }, session });
    expect(handle.expiresAt).to.equal(before);
    expect(calls.at(-1)).to.deep.include({ method: 'findOneAndUpdate', inTransaction: true, w: undefined });
    await handle.release();
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
