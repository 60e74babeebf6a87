/**
 * A commit whose reply is lost is never settled as applied because its lock entry is absent: the
 * entry may be absent for another reason (never written: `err.lock` of an acquisition whose
 * request never landed; expired earlier than the handle believes, after an extension that
 * shortened the lease lost its reply, and replaced by another client's lock). Only the commit's
 * own record proves it landed.
 *
 * Requests and replies are held back by a predicate on the command (which write it is), so that
 * background writes of the library (the release of `err.lock`) never shift what is held.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, writeLock, type LockHandle } from '../lib';
import { freshCollection, rejectionOf } from './support/fixture';

type Hold = { request?: Promise<unknown>; reply?: Promise<unknown> } | undefined;

/** The same collection, with the request or reply of the writes `plan` picks (by method and arguments) held until its promise settles. */
function heldWhere(collection: Collection<Document>, plan: (method: string, args: unknown[]) => Hold): Collection<Document> {
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (method !== 'findOneAndUpdate' && method !== 'updateOne') return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const hold = plan(method, args);
        if (hold?.request) await hold.request;
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (hold?.reply) await hold.reply;
        return result;
      };
    },
  });
}

const never = new Promise<never>(() => undefined);
const isAcquisition = (method: string, args: unknown[]): boolean => method === 'findOneAndUpdate' && (args[1] as Document).$inc?.['lock.fence'] === 1;
const isExtension = (method: string, args: unknown[]): boolean =>
  method === 'findOneAndUpdate' && Object.keys((args[1] as Document).$set ?? {}).some((path) => path.endsWith('.$[mine].exp'));
const isCommit = (method: string, args: unknown[]): boolean => method === 'updateOne' && (args[1] as Document).$push?.['lock.committed'] !== undefined;

/** How a call settled: 'resolved', or its error. */
async function outcomeOf(promise: PromiseLike<unknown>): Promise<'resolved' | (Error & Record<string, unknown>)> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    return error as Error & Record<string, unknown>;
  }
}

describe('settling a lost commit when its lock entry is absent for another reason', () => {
  it('a commit from err.lock of an acquisition that never landed, whose own request is lost, is never reported applied', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc', balance: 100 }]);
    // The acquisition's request never reaches the server (its reply is "lost": the deadline passes); so does the commit's.
    const held = heldWhere(collection, (method, args) => (isAcquisition(method, args) || isCommit(method, args) ? { request: never } : undefined));
    const accounts = writeLock({ collection: held, locktimeout: 10_000, timeout: 500 });
    const lost = await rejectionOf(accounts.acquire({ _id: 'acc' }));
    expect(isLockError(lost, 'DbError')).to.equal(true);
    const handle = lost.lock as LockHandle;
    expect(handle, 'err.lock: the lock that may have been written').not.to.equal(undefined);

    const outcome = await outcomeOf(handle.release({ update: { $inc: { balance: -30 } } }));
    const balance = (await collection.findOne({ _id: 'acc' as never }))?.balance;
    expect(balance, 'the update never landed').to.equal(100);
    // The handle's contract: "a release with an update never resolves unless the update landed".
    expect(outcome, 'the commit was reported applied, but it never landed').not.to.equal('resolved');
    expect((outcome as { data?: { applied?: unknown } }).data?.applied).to.be.oneOf([false, 'unknown']);
  });

  it('a commit whose handle missed a shortening extension is never reported applied once another client holds the lock', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc', balance: 100 }]);
    // The extension lands but its reply never comes back; the commit's request never reaches the server.
    const held = heldWhere(collection, (method, args) => (isExtension(method, args) ? { reply: never } : isCommit(method, args) ? { request: never } : undefined));
    const accounts = writeLock({ collection: held, locktimeout: 300, timeout: 500 });
    const handle = await accounts.acquire({ _id: 'acc' }, { locktimeout: 10_000 });
    // extend() without a lease: the tag's lease (300 ms), shorter than this lock's 10 s. Applied; its reply is lost.
    const extension = await rejectionOf(handle.extend());
    expect(isLockError(extension, 'DbError')).to.equal(true);
    expect(handle.expiresAt - handle.timestamp, 'the handle still believes its 10 s lease').to.equal(10_000);

    // The lock really ended 300 ms after the extension: another client takes it.
    const other = await writeLock({ collection }).acquire({ _id: 'acc' }, { wait: 5_000 });

    const outcome = await outcomeOf(handle.release({ update: { $inc: { balance: -30 } } }));
    const doc = await collection.findOne({ _id: 'acc' as never });
    expect(doc?.balance, 'the update never landed').to.equal(100);
    expect(doc?.lock?.tags?.write?.map((entry: { id: string }) => entry.id), 'the other client holds the lock').to.deep.equal([other.id]);
    expect(outcome, 'the commit was reported applied, while another client holds the lock and the update never landed').not.to.equal('resolved');
    expect((outcome as { data?: { applied?: unknown } }).data?.applied).to.be.oneOf([false, 'unknown']);
    await other.release();
  });
});
