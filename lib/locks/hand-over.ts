import type { Document } from 'mongodb';
import { isLockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { namesOneDocument } from '../common/validation';
import type { Acquired } from '../engine/acquired';
import { HandOverFailed, type GranteeTerms } from '../engine/hand-over';
import { noteReleased } from '../engine/recent-releases';
import type { LockEngine } from '../engine/lock-engine';
import type { LockData } from '../protocol/lock-data';
import type { LocalWaiters } from '../waiting/local-waiters';
import type { Waiter } from '../waiting/waiter';
import { releaseKeepsEntry } from '../protocol/min-hold';

/**
 * Releases `holder`'s lock on the document `target`: with `release`, then `released()` (which wakes
 * this process's next waiter). Or, when `target` is `{ _id }` alone (with the shard key's values), the lock is an exclusive
 * tag's, and the first waiter of this process that it blocks sleeps between attempts, by handing
 * it over to that waiter in one update (see lib/engine/hand-over.ts): one write instead of a
 * release and the waiter's acquisition, and the waiter learns at once that it holds the lock. A
 * hand-over that matched nothing releases with `release`, before the waiter tries again.
 *
 * A hand-over whose write failed (a lost reply, a late request) is settled: `release` is sent (the
 * hand-over requires the holder's entry, so once it is gone the hand-over can no longer land).
 * When it matched, the hand-over did not land. When the entry was already gone, the waiter's
 * entry is withdrawn: found, the hand-over had landed, so the holder's lock was released, and the
 * waiter acquires by itself (the token it was given cannot be read back for sure). Only when that
 * cannot be known does the holder get a `DbError`; the waiter then waits on, and the lock that may
 * have been written for it is released once that write can no longer land.
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
  // Non-fair: a process hands a document to its own waiters a bounded number of times in a row, then yields it (lib/waiting/local-waiters.ts).
  const yielding = grantee?.terms?.fairness() === undefined && grantee !== undefined && !waiters.mayHandOver(target._id);
  if (!grantee?.terms || !holder || yielding) {
    try {
      return await release();
    } finally {
      if (yielding && holder) waiters.yielded(target._id, holder.tag, holder.id);
      else released();
    }
  }
  let settle!: (handed: Promise<Acquired | undefined>) => void;
  grantee.handOver(new Promise((resolve) => (settle = resolve)));
  let handed: Acquired | undefined;
  try {
    handed = await engine.handOver(target, holder, grantee.terms, call);
  } catch (error) {
    if (!(error instanceof HandOverFailed)) {
      settle(Promise.resolve(undefined));
      released();
      throw error;
    }
    return settleFailed(engine, error, grantee.terms, call, release, released, (outcome) => settle(outcome));
  }
  if (handed) {
    waiters.handedOver(target._id, holder.id);
    noteReleased(holder.id);
    return settle(Promise.resolve(handed));
  }
  try {
    await release();
  } finally {
    released();
    settle(Promise.resolve(undefined));
  }
}

/** Settles a hand-over whose write failed (see {@link releaseHandingOver}); `settle` gives the waiter its outcome. */
async function settleFailed(
  engine: LockEngine,
  failed: HandOverFailed,
  terms: GranteeTerms,
  call: ResolvedCallOptions,
  release: () => Promise<void>,
  released: () => void,
  settle: (handed: Promise<Acquired | undefined>) => void,
): Promise<void> {
  let releaseError: unknown;
  try {
    await release();
  } catch (error) {
    releaseError = error;
  }
  // Known: the holder's entry gone, and whether the waiter's was there (now withdrawn); null: unknown.
  const landed = releaseError === undefined ? false : isLockError(releaseError, 'DbError') ? null : await engine.withdrawHandOver(failed.written, terms, call).catch(() => null);
  released();
  if (landed === null) {
    settle(Promise.reject(failed.granteeError)); // released by the waiter once it can no longer land
    throw failed.holderError;
  }
  settle(Promise.resolve(undefined));
  if (releaseError !== undefined && !landed) throw releaseError;
}

/** The waiter a release of `holder` on `target` may hand the lock to, if any: none when the release leaves a minimum hold's entry (a lock passed back without minHoldUntil is handed over only if its entry has no hold). */
function granteeOf(engine: LockEngine, waiters: LocalWaiters, target: Document, holder: LockData | undefined): Waiter | undefined {
  if (!holder || releaseKeepsEntry(holder.minHoldUntil) || holder.owner !== undefined || holder.permits !== undefined || holder.maybeTag !== undefined || !engine.rule(holder.tag).exclusive) return undefined;
  return namesOneDocument(target, engine.store.shardKey) ? waiters.grantee(target._id, holder.tag) : undefined;
}
