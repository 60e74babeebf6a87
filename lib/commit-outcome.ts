import type { Document } from 'mongodb';
import { lockError, withDbErrors } from './errors';
import type { LockData } from './lock-handle';
import type { ResolvedCallOptions } from './options';
import type { Inspection, Store } from './store';
import { allOf, hasEntry, type LockPaths } from './stored-format';
import { classifyWriteFailure } from './write-failures';

/** What a commit outcome is settled with. */
export interface CommitSettlement {
  readonly store: Store;
  readonly paths: LockPaths;
  /** The write concern of a write that carries the caller's data (majority at least). */
  readonly w: ResolvedCallOptions['w'];
}

/** How often the majority read is tried when it does not yet show what the primary showed, and how long apart (ms). */
const MAJORITY_READS = 5;
const MAJORITY_READ_PAUSE = 50;

/**
 * Settles a commit (a release that carries an update) that failed with `failure`: resolves when
 * the update landed, rejects with `DbError` whose `data.applied` says the truth otherwise.
 *
 * A commit matches only while its lock entry is in the document, and removes that entry with the
 * update. So the outcome is decided once the entry is gone:
 * 1. The entry is removed by this call (an update sent at majority): if that matched, the commit
 *    had not landed, and now never can, however late it arrives (a slow network, a queued
 *    connection, the driver's retry): `applied: false`, and the lock is released.
 * 2. Otherwise the entry was already gone, and the document is read at majority (a read that a
 *    failover cannot roll back; after the majority removal above it shows every write before it):
 *    - the lock id is in `committed` (the commit's own record): it landed;
 *    - read before the lease ended, and no forced release since the lock was taken: only the
 *      commit can have removed a live entry (pruning removes expired ones only), so it landed;
 *    - after the lease, with the record not found among the last 16 commits kept: the entry may
 *      have been pruned after it expired, or the record evicted: `applied: 'unknown'`.
 * A failure to reach MongoDB while settling is `applied: 'unknown'`, and so is a closed client.
 */
export async function settleCommit(
  settlement: CommitSettlement,
  target: Document,
  claimed: LockData,
  failure: Error,
  call: ResolvedCallOptions,
): Promise<void> {
  const { store, paths } = settlement;
  const cause = failure.cause ?? failure;
  const fail = (applied: false | 'unknown', detail: string): Error =>
    lockError('DbError', call.boom, { cause, detail: `${failure.message}; ${detail}`, data: { applied } });
  if (classifyWriteFailure(cause) === 'closed') throw fail('unknown', 'whether the update was applied cannot be told: the MongoDB client is closed');

  let removed: boolean;
  try {
    removed = await withDbErrors(call.boom, () =>
      store.updateOne(allOf(target, [hasEntry(paths, claimed.tag, { id: claimed.id })]), { $pull: { [paths.tag(claimed.tag)]: { id: claimed.id } } }, call, settlement.w),
    );
  } catch {
    throw fail('unknown', 'whether the update was applied is unknown: MongoDB could not be reached to settle it (the lock may be held until its lease ends)');
  }
  if (removed) throw fail(false, 'the update was not applied, and never will be: the lock was released');

  for (let read = 1; ; read++) {
    let seen: Inspection;
    try {
      seen = await withDbErrors(call.boom, () => store.inspect(target, call, 'majority'));
    } catch {
      throw fail('unknown', 'whether the update was applied is unknown: MongoDB could not be read to settle it');
    }
    if (!seen.value) throw fail('unknown', 'whether the update was applied is unknown: the document is gone');
    const stored = paths.read(seen.value);
    if ((stored.committed ?? []).includes(claimed.id)) return;
    const entryThere = (stored.tags?.[claimed.tag] ?? []).some((entry) => entry.id === claimed.id);
    if (entryThere) {
      // The primary had removed it; this member's majority view has not caught up yet.
      if (read < MAJORITY_READS) {
        await new Promise((resolve) => setTimeout(resolve, MAJORITY_READ_PAUSE));
        continue;
      }
      throw fail('unknown', 'whether the update was applied is unknown: it is not yet majority-committed');
    }
    const readAt = seen.serverNow?.getTime() ?? Infinity;
    const forcedSince = stored.forced instanceof Date && stored.forced.getTime() >= claimed.timestamp;
    if (readAt < claimed.expiresAt && !forcedSince) return;
    throw fail('unknown', 'whether the update was applied is unknown: its lease had ended, and its record is not among the last commits kept');
  }
}
