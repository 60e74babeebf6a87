import type { Document } from 'mongodb';
import { isLockError, lockError, withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { inTransaction, type FinalWrite } from '../common/write-params';
import type { LockData, TagRule } from '../protocol/lock-data';
import type { Proof } from '../protocol/proofs';
import { forcedReleaseOperation, releaseOperation } from '../protocol/release';
import { mergeUpdates } from '../protocol/operation';
import { commitRecord, DATA_WRITE_CONCERN, settleCommit, settleTimestampCommit } from './commit-outcome';
import type { EngineSettings } from './lock-engine';
import { explainLostLock } from './refusals';
import { noteReleased } from './recent-releases';
import { failedRelease } from './write-failures';
import { releaseKeepsEntry } from '../protocol/min-hold';
import { storedHoldOf, withStoredHold } from './stored-hold';

/** What a release writes besides removing the lock: the caller's final write (a commit), and the group of a `commitAll`. */
export interface ReleaseWrite extends Partial<FinalWrite> {
  readonly group?: string;
  /** Monglock's own update of the lock field, applied as a commit's (a quarantine mark: lib/protocol/quarantine.ts). */
  readonly mark?: Document;
  /** A release that keeps its entry (minHold): what the kept entry's fields become besides (a resource lock's group, renamed). */
  readonly keptFields?: Document;
}

/** A release to run: the document it addresses, the lock (its tag, its proof, its data if known), what it also writes. */
export interface LockRelease {
  readonly target: Document;
  readonly tag: string;
  /** Its id or v2 timestamp; none: monglock v2's forced release. */
  readonly proof: Proof | undefined;
  readonly claimed: LockData | undefined;
  readonly write: ReleaseWrite;
}

/**
 * Release ({@link releaseOperation}, at `releaseW`), or commit (with `write.update`, at
 * majority; with `write.mark`, a quarantine: the same commit, the mark merged into its update),
 * or without a proof monglock v2's forced release ({@link forcedReleaseOperation}).
 * A commit whose reply is lost is settled (see {@link settleCommit}); a group's commit records its
 * `group`. Inside the caller's transaction (`call.session`), a failure is not settled: the
 * transaction decides what lands.
 */
export async function releaseLock(settings: EngineSettings, rule: TagRule, request: LockRelease, call: ResolvedCallOptions, readClock: () => Promise<void>): Promise<void> {
  const { paths, store, clock, reportsReacquired } = settings;
  const { target, tag, proof, write } = request;
  const { group } = write;
  const update = write.mark ? mergeUpdates(write.update, write.mark) : write.update;
  if (!proof) {
    const matched = await withDbErrors(call.boom, () => store.applyOne(forcedReleaseOperation(paths, target, tag), call, call.releaseW)).catch((error: unknown) => {
      throw isLockError(error, 'DbError') ? failedRelease(error, call.boom) : error;
    });
    if (!matched) throw lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' });
    return;
  }
  const { claimed } = request;
  // A lock passed back without minHoldUntil: removed only if its entry has no hold (see below: else released again, keeping it).
  const holdAbsent = claimed?.holdUnknown === true && 'id' in proof;
  const record = update && 'id' in proof ? commitRecord(proof.id, clock, call.timeout, group) : undefined;
  const w = update ? DATA_WRITE_CONCERN : call.releaseW;
  // A lock taken with minHold: its entry is kept (renamed, no hold) until its minimum hold ends by the server's clock, never judged by this client's.
  const keptUntil = releaseKeepsEntry(claimed?.minHoldUntil) ? new Date(claimed.minHoldUntil) : undefined;
  let matched: boolean;
  try {
    matched = await withDbErrors(call.boom, () =>
      store.applyOne(releaseOperation({ paths, rule, target, proof, update, match: write.match, arrayFilters: write.arrayFilters, record, alsoTag: claimed?.maybeTag, keptUntil, keptFields: write.keptFields, holdAbsent }), call, w),
    );
  } catch (error) {
    if (inTransaction(call)) throw error; // nothing is settled inside the transaction: it decides what lands
    if (!isLockError(error, 'DbError')) throw error;
    if (!update) throw failedRelease(error, call.boom);
    if (!record) return settleTimestampCommit(error, call);
    // A lock passed back without minHoldUntil: its stored hold, if any, makes the settling write keep its entry (renamed) rather than remove it.
    const known = holdAbsent && claimed ? await withStoredHold(store, paths, target, claimed, call).catch(() => claimed) : claimed;
    const lock = known ?? { id: record.lock, tag, timestamp: 0, fence: 0, expiresAt: 0 };
    return settleCommit({ store, paths, clock, readClock }, target, { lock, record }, error, call);
  }
  if (matched) {
    if ('id' in proof) noteReleased(proof.id);
    return;
  }
  const seen = await withDbErrors(call.boom, () => store.inspect(target, call));
  const hold = holdAbsent ? storedHoldOf(paths.read(seen.value), tag, proof.id) : undefined;
  // Its entry has a hold: a lock taken with minHold, released as its handle releases it.
  if (claimed && hold !== undefined) return releaseLock(settings, rule, { ...request, claimed: { ...claimed, holdUnknown: undefined, minHoldUntil: hold } }, call, readClock);
  const lost = explainLostLock({ paths, rule, reportsReacquired, boom: call.boom, withUpdate: update !== undefined, withMatch: write.match !== undefined }, seen, claimed ?? { id: '', tag, timestamp: 0, fence: 0, expiresAt: 0 }, proof);
  throw lost.error ?? lockError('LockNotFound', call.boom, { detail: 'the lock is not held' });
}
