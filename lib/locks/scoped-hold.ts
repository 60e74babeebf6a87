import type { Document } from 'mongodb';
import { CommitAllRequest, CommitRequest, FOREIGN_COMMIT, isBareUpdate, isForeignCommit, type Commit } from './commit';
import type { BoomLike } from '../common/errors';
import { isLockError } from '../common/errors';
import { keptLease, LeaseKeeper } from './lease-keeper';
import { NEVER } from '../protocol/lock-data';
import { Handle, type LockHandle } from './lock-handle';
import { endHold, type HoldEnd } from './transaction-writes';
import { linkSignals } from '../waiting/wait-options';
import { Quarantine } from './quarantine';

/**
 * The body of `using()`: runs while the lock is held; `signal` aborts if the lease is lost. It
 * may return {@link commit}`(update, value)` to end with a write applied by the release itself,
 * or `quarantine(reason, options)` to end it with a quarantine mark (lib/locks/quarantine.ts).
 */
export type UsingBody<T, H = LockHandle, TSchema extends Document = Document> = (
  handle: H,
  signal: AbortSignal,
) => T | Commit<T, TSchema> | Quarantine<T, TSchema> | PromiseLike<T | Commit<T, TSchema> | Quarantine<T, TSchema>>;

/** How to keep and end a held lock while a body runs. */
export interface HoldSettings {
  /** Lease to extend to, in ms; `Infinity` for a lock without expiry (never extended). */
  readonly leaseMs: number;
  /** Options passed to `extend` and `release`. */
  readonly callParams: { readonly timeout: number; readonly [key: string]: unknown };
  /** The caller's signals (its `signal`, a promise cancellation) whose abort is forwarded to the body's. */
  readonly outerSignals: ReadonlyArray<AbortSignal | undefined>;
  readonly boom: BoomLike | undefined;
  /** ms after which renewal stops, the body's signal aborts (`MaxHoldExceeded`) and the lock is released. */
  readonly maxHoldMs: number;
  /** How the hold ends, by what the caller's transaction wrote of the lock (a document lock's); default: released. */
  readonly ending?: () => HoldEnd;
}

/**
 * Runs `body` while `handle` is held: extends the lease before it can expire, aborts the body's
 * signal with the reason when an extension fails or the lease may end (judged by the upper bound
 * of the server's clock), and always releases.
 * Resolves the body's result; a body error is never masked by a release failure; a failed
 * release after a successful body rejects (the lock was lost), except `RessourceNotFound` (the
 * body may delete the document). A body that returns a {@link Commit} has its update applied by
 * the release (rejecting if it could not be); a {@link Quarantine}, its mark. No timer is left afterwards. A lock the body wrote in
 * the caller's transaction is not released inside it (see {@link HoldEnd}), and is no longer kept
 * once released there.
 */
export async function holdWhile<T, H extends Handle>(handle: H, settings: HoldSettings, body: UsingBody<T, H, Document>): Promise<T> {
  const controller = new AbortController();
  const outer = linkSignals(...settings.outerSignals);
  const forward = (): void => controller.abort(outer.signal?.reason);
  if (outer.signal?.aborted) forward();
  else outer.signal?.addEventListener('abort', forward, { once: true });
  const started = Date.now();
  const ending = (): HoldEnd => settings.ending?.() ?? 'release';
  // A keeper started later (a renew gave a lock without expiry one) keeps the same maxHold.
  const keep = (leaseMs: number): LeaseKeeper =>
    new LeaseKeeper({ ...keptLease(handle, leaseMs, settings.boom, settings.callParams), letGo: () => ending() === 'released' }, leaseMs, controller, settings.maxHoldMs, Date.now() - started);
  let keeper = Number.isFinite(settings.leaseMs) ? keep(settings.leaseMs) : undefined;
  // The lease may change under the body (it extends its handle; a group is renewed): replan, and
  // a lock without expiry that was given one (a renew) is kept from then on, to that lease.
  const unwatch = Handle.watchExpiry(handle, () => {
    if (keeper) keeper.replan();
    else if (handle.expiresAt < NEVER) keeper = keep(Math.max(1, handle.remaining()));
  });
  const release = (end: HoldEnd): Promise<void> => endHold(end, () => handle.release(settings.callParams), settings.callParams.timeout);
  const finish = async (commit?: { update: Document; options: object }, marked?: Quarantine<unknown, Document>): Promise<void> => {
    unwatch();
    const end = commit || marked ? 'release' : ending();
    const stopping = keeper?.stop();
    // An extension sent while the caller's transaction holds the document lands once it ends: not waited for.
    if (end === 'release') await stopping;
    outer.signal?.removeEventListener('abort', forward);
    outer.dispose();
    if (commit) return handle.release({ ...settings.callParams, ...commit.options, update: commit.update });
    if (marked) return handle.quarantine({ timeout: settings.callParams.timeout, boom: settings.boom, ...marked.options, reason: marked.reason });
    await release(end);
  };
  let result: T | Commit<T, Document> | Quarantine<T, Document>;
  try {
    result = await body(handle, controller.signal);
  } catch (error) {
    await finish().catch(() => undefined);
    throw error;
  }
  // maxHold passed while the body ran: the lock was released then, and nothing the body returns is applied.
  if (isLockError(controller.signal.reason, 'MaxHoldExceeded')) {
    await finish().catch(() => undefined);
    throw controller.signal.reason;
  }
  // A commit's update is applied with the release, only while the lock is held. If it was not
  // applied (refused by MongoDB or by validation), or it cannot be told, the lock is released
  // without it, and the caller hears why.
  if (result instanceof CommitAllRequest) {
    await finish().catch(() => undefined);
    throw new TypeError('Expected a `using()` body to return `commit(update, value)`, for its one document: `commitAll([update, …])` is for a `usingAll()` group (nothing was written, and the lock was released)');
  }
  if (result instanceof CommitRequest || result instanceof Quarantine) {
    try {
      await (result instanceof Quarantine ? finish(undefined, result) : finish(result));
    } catch (error) {
      if (!isLockError(error, 'LockNotFound') && !isLockError(error, 'LockWasReacquired')) await release(ending()).catch(() => undefined);
      throw error;
    }
    return result.value;
  }
  if (isBareUpdate(result)) {
    await finish().catch(() => undefined);
    throw new TypeError('Expected a `using()` body to return `commit(update, value)` to write `update`, got an update document (`{ $set: … }`) alone: nothing was written, and the lock was released');
  }
  if (isForeignCommit(result)) {
    await finish().catch(() => undefined);
    throw new TypeError(`Expected a \`using()\` body to return this copy's \`commit(update, value)\`, got ${FOREIGN_COMMIT}: nothing was written, and the lock was released`);
  }
  await finish().catch((error: unknown) => {
    if (!isLockError(error, 'RessourceNotFound')) throw error;
  });
  return result as T;
}
