import { namesOneDocument } from '../common/validation';
import type { Document } from 'mongodb';
import { lockError, withDbErrors } from '../common/errors';
import type { LockData } from '../protocol/lock-data';
import type { ResolvedCallOptions } from '../common/options';
import type { Inspection, Store } from './store';
import { newLockId } from '../protocol/lock-ids';
import type { ServerClock } from '../protocol/server-clock';
import { withdrawOrKeepOperation } from '../protocol/release';
import { COMMIT_RECORDS, hasEntry, type LockPaths, type StoredCommit } from '../protocol/stored-format';
import { classifyWriteFailure } from './write-failures';

/** What a commit outcome is settled with. */
export interface CommitSettlement {
  readonly store: Store;
  readonly paths: LockPaths;
  readonly clock: ServerClock;
  /** Reads the server's clock into `clock` (when no reply has told it yet). */
  readonly readClock: () => Promise<void>;
}

/**
 * A commit: the lock it releases, and the record it leaves. `landsBy` is the server time after
 * which the lock's own acquisition can no longer land: 0 for a lock whose acquisition was
 * confirmed; unknown (undefined) for a lock passed back as data, which is then bounded by its
 * stamp (`timestamp` + the widest tolerance + the call's `timeout`).
 */
export interface CommitAttempt {
  readonly lock: LockData & { readonly landsBy?: number };
  readonly record: StoredCommit;
}

/** How often the majority read is tried when it does not yet show what the primary showed, and how long apart (ms). */
const MAJORITY_READS = 5;
const MAJORITY_READ_PAUSE = 50;
/**
 * How far the server's clock may step back between a record's pruning and the read that settles
 * it (ms): a read this much before the record's `exp` proves the record was not pruned yet.
 */
const CLOCK_STEP_MARGIN = 5_000;

/**
 * The record a commit of lock `id` leaves: kept until the server's clock passes the time by which
 * its settling read has certainly been made (the commit's deadline, then the settling write's,
 * plus a margin), as far as this client can tell; the settlement checks it, so a wrong guess
 * only makes an outcome unknown, never untrue.
 */
export function commitRecord(lockId: string, clock: ServerClock, timeout: number, group?: string): StoredCommit {
  const upper = clock.upper();
  const now = Number.isFinite(upper) ? upper : clock.lower();
  return { id: newLockId(), lock: lockId, exp: new Date(now + 2 * timeout + 2 * CLOCK_STEP_MARGIN), ...(group !== undefined && { group }) };
}

/**
 * Settles a commit (a release that carries an update) that failed with `failure`: resolves when
 * the update landed, rejects with `DbError` whose `data.applied` says the truth otherwise.
 *
 * A commit matches only while its lock entry is in the document, removes that entry with the
 * update, and leaves its record in `committed`. So the outcome is decided once the entry is gone:
 * 1. If the lock's own acquisition may still land (`err.lock` of a lost reply, or a lock passed
 *    back as data), wait until the server's clock has passed the time its stamp allows (it can no
 *    longer land after).
 * 2. The entry is removed by this call (an update sent at majority; a lock taken with minHold
 *    keeps it, renamed, as its release does): if that matched, the commit had not landed, and now
 *    never can, however late it arrives (a slow network, a queued connection, the driver's retry):
 *    `applied: false`, and the lock is released.
 * 3. Otherwise the entry was already gone, and the locked document is read at majority (a read
 *    that a failover cannot roll back; after the majority removal above it shows every write
 *    before it). Only a `target` that names its `_id` identifies it; any other filter may select
 *    another document now, so then the document holding the entry or the record is read (when
 *    neither is found, the outcome is unknown):
 *    - the commit's record (its own id, not only its lock's) is there: it landed;
 *    - the record is not there, and could not have been removed (read before its `exp`, and the
 *      records kept are fewer than {@link COMMIT_RECORDS} or include one kept for less time):
 *      the commit never landed (the lock had expired, was taken over, force-released, or never
 *      written), and never will: `applied: false`;
 *    - otherwise `applied: 'unknown'`.
 * A failure to reach MongoDB while settling is `applied: 'unknown'`; a client closed before the
 * commit was sent, or a commit whose deadline passed while it waited for a slot among its client's
 * lock commands, is `applied: false` (nothing was sent).
 */
export async function settleCommit(settlement: CommitSettlement, target: Document, commit: CommitAttempt, failure: Error, call: ResolvedCallOptions): Promise<void> {
  const { store, paths } = settlement;
  const { lock, record } = commit;
  const cause = failure.cause ?? failure;
  const fail = (applied: false | 'unknown', detail: string): Error =>
    lockError('DbError', call.boom, { cause, detail: `${failure.message}; ${detail}`, data: { applied } });
  const failed = classifyWriteFailure(cause);
  if (failed === 'closed') throw fail(false, 'the update was not applied: the MongoDB client was closed before it was sent (the lock is held until its lease ends)');
  if (failed === 'unsent') throw fail(false, 'the update was not applied: it was never sent (the lock is held until its lease ends)');

  // When the lock's acquisition could land is unknown without a stamp: then an absent entry proves nothing.
  // A lock passed back as data: its stamp's widest window, and a command blocked for this call's timeout.
  const landsBy = lock.landsBy ?? (lock.timestamp > 0 ? lock.timestamp + settlement.clock.widestTolerance() + call.timeout : undefined);
  let removed: boolean;
  try {
    if (landsBy !== undefined && landsBy > 0) await untilServerPassed(settlement, landsBy);
    removed = await withDbErrors(call.boom, () =>
      store.applyOne(withdrawOrKeepOperation(paths, target, lock.tag, lock.id, lock.minHoldUntil === undefined ? undefined : new Date(lock.minHoldUntil)), call, DATA_WRITE_CONCERN),
    );
  } catch {
    throw fail('unknown', 'whether the update was applied is unknown: MongoDB could not be reached to settle it (the lock may be held until its lease ends)');
  }
  if (removed) throw fail(false, 'the update was not applied, and never will be: the lock was released');

  const identified = namesOneDocument(target, store.shardKey);
  // The lock's and the commit's ids are random: the document holding either is the locked one, wherever the filter points now.
  const locked = identified ? target : { $or: [hasEntry(paths, lock.tag, { id: lock.id }), { [paths.committed]: { $elemMatch: { id: record.id } } }] };
  for (let read = 1; ; read++) {
    let seen: Inspection;
    try {
      seen = await withDbErrors(call.boom, () => store.inspect(locked, call, 'majority'));
    } catch {
      throw fail('unknown', 'whether the update was applied is unknown: MongoDB could not be read to settle it');
    }
    if (!seen.value) {
      throw fail('unknown', `whether the update was applied is unknown: ${identified ? 'the document is gone' : 'no document holds the lock or the commit\'s record, and the filter does not name the locked document'}`);
    }
    const stored = paths.read(seen.value);
    const records = Array.isArray(stored.committed) ? stored.committed : [];
    if (records.some((kept) => kept.id === record.id)) return;
    const entryThere = (stored.tags?.[lock.tag] ?? []).some((entry) => entry.id === lock.id);
    if (entryThere) {
      // The primary had removed it; this member's majority view has not caught up yet.
      if (read < MAJORITY_READS) {
        await new Promise((resolve) => setTimeout(resolve, MAJORITY_READ_PAUSE));
        continue;
      }
      throw fail('unknown', 'whether the update was applied is unknown: it is not yet majority-committed');
    }
    const readAt = seen.serverNow?.getTime() ?? Infinity;
    const notPruned = readAt + CLOCK_STEP_MARGIN < record.exp.getTime();
    const notEvicted = records.length < COMMIT_RECORDS || records.some((kept) => kept.exp instanceof Date && kept.exp.getTime() < record.exp.getTime());
    if (notPruned && notEvicted && landsBy !== undefined) {
      throw fail(false, 'the update was not applied, and never will be: the lock was not held when it arrived (expired, taken over, released or never written)');
    }
    const why = landsBy === undefined ? 'the lock, passed back without its timestamp, may still be written' : `its record is not among the ${records.length} commits the document keeps`;
    throw fail('unknown', `whether the update was applied is unknown: ${why}`);
  }
}

/**
 * Resolves once the lower bound of the server's clock is past `ms` (reading the server's clock
 * first if this client has not), pausing with `pause` (background work passes its own).
 */
export async function untilServerPassed(settlement: Pick<CommitSettlement, 'clock' | 'readClock'>, ms: number, pause = (wait: number): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, wait))): Promise<void> {
  if (!settlement.clock.synchronized) await settlement.readClock();
  const wait = settlement.clock.untilPast(ms);
  if (wait > 0) await pause(wait);
}

/**
 * The write concern of a write that carries the caller's data (a commit, an extension with an
 * update) and of the write that settles one: majority, whatever `w` is. A number of members below
 * a majority (`w: 2` on a set of five) could be rolled back, and a commit reported applied, or
 * "not applied and never will be", would then be untrue; a number at or above a majority gains
 * nothing over `'majority'`, which needs no member count.
 */
export const DATA_WRITE_CONCERN: ResolvedCallOptions['w'] = 'majority';

/**
 * Settles a commit proved by a monglock v2 timestamp, whose write failed: it leaves no record to
 * read back, so unless the server refused it (nothing was written), its outcome is unknown.
 */
export function settleTimestampCommit(error: Error & { cause?: unknown }, call: ResolvedCallOptions): never {
  const refused = classifyWriteFailure(error.cause) !== 'unknown';
  throw lockError('DbError', call.boom, {
    cause: error.cause,
    detail: `${error.message}; ${refused ? 'the update was not applied (the lock is still held)' : 'whether the update was applied is unknown (a timestamp proof leaves no record: use the handle)'}`,
    data: { applied: refused ? false : 'unknown' },
  });
}
