import type { Document } from 'mongodb';
import { isLockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { idNamedBy } from '../common/validation';
import type { Acquired } from '../engine/acquired';
import { HandOverFailed } from '../engine/hand-over';
import type { LockEngine } from '../engine/lock-engine';
import type { LockData } from '../protocol/lock-data';
import type { LocalWaiters, Waiter } from '../waiting/local-waiters';

/**
 * Releases `holder`'s lock on the document `target`: with `release`, then `released()` (which wakes
 * this process's next waiter); or, when `target` is `{ _id }`, the lock an exclusive tag's and the
 * first waiter of this process that it blocks sleeps between attempts, by handing it over to that
 * waiter in one update (see lib/engine/hand-over.ts): one write instead of a release and the
 * waiter's acquisition, and the waiter learns at once that it holds the lock. A hand-over that
 * matched nothing releases with `release`, before the waiter tries again.
 *
 * A hand-over whose write failed (a lost reply, a late request) is settled: `release` is sent (the
 * hand-over requires the holder's entry, so once it is gone the hand-over can no longer land);
 * when it matched, the hand-over did not land; when the entry was already gone, a read at
 * majority tells whether the waiter's entry is there. Only when that cannot be known does the
 * holder get a `DbError`; the waiter then waits on, and the lock that may have been written for
 * it is released once that write can no longer land.
 */
export async function releaseHandingOver(
  engine: LockEngine,
  waiters: LocalWaiters,
  target: Document,
  holder: LockData | undefined,
  call: ResolvedCallOptions,
  release: () => Promise<void>,
  released: () => void,
): Promise<void> {
  const grantee = granteeOf(engine, waiters, target, holder);
  if (!grantee?.terms || !holder) {
    try {
      return await release();
    } finally {
      released();
    }
  }
  let settle!: (handed: Promise<Acquired | undefined>) => void;
  grantee.handOver(new Promise((resolve) => (settle = resolve)));
  let handed: Acquired | undefined | null;
  let releaseError: unknown;
  let failed: HandOverFailed | undefined;
  try {
    handed = await engine.handOver({ _id: target._id }, holder, grantee.terms, call);
  } catch (error) {
    if (!(error instanceof HandOverFailed)) {
      settle(Promise.resolve(undefined));
      released();
      throw error;
    }
    failed = error;
  }
  if (!handed) {
    // No hand-over (it matched nothing, or failed): a plain release, which also stops a failed one from landing later.
    try {
      await release();
    } catch (error) {
      releaseError = error;
    }
    if (failed && releaseError !== undefined) handed = isLockError(releaseError, 'DbError') ? null : await engine.settleHandOver(failed.written, call).catch(() => null);
  }
  if (handed) {
    waiters.handedOver(target._id, holder.id);
    return settle(Promise.resolve(handed));
  }
  released();
  // Unknown: the waiter's lock is released once its write can no longer land (and the holder told so).
  settle(handed === null ? Promise.reject(failed!.granteeError) : Promise.resolve(undefined));
  if (handed === null) throw failed!.holderError;
  if (releaseError !== undefined) throw releaseError;
}

/** The waiter a release of `holder` on `target` may hand the lock to, if any. */
function granteeOf(engine: LockEngine, waiters: LocalWaiters, target: Document, holder: LockData | undefined): Waiter | undefined {
  if (!holder || holder.owner !== undefined || holder.permits !== undefined || holder.maybeTag !== undefined || !engine.rule(holder.tag).exclusive) return undefined;
  const id = idNamedBy(target);
  return id === undefined || Object.keys(target).length !== 1 ? undefined : waiters.grantee(id, holder.tag);
}
