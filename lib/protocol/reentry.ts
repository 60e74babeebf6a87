import type { Document } from 'mongodb';
import type { TagRule } from './lock-data';
import { mergeUpdates, type LockOperation } from './operation';
import { allOf, entryUnexpired, everyEntryDead, liveEntries, pruneCommits, pruneTags, recordJudged, stampWithin, type LockPaths, type StoredEntry, type StoredLock } from './stored-format';
import { recordStamp, stampNotBeforeRecent } from './recent-stamps';
import { notQuarantined } from './quarantine';

/**
 * Reentrant locks, keyed by an owner (a string the caller chooses). Each hold of an owner is an
 * entry of its own, with its own id, lease and release, so that every hold must be released and
 * an inner release never frees an outer hold; the lock is free once the owner's last entry is
 * gone or expired. Every hold of an owner keeps the fencing token of its first (`fence` in the
 * entry). Other acquirers see the owner's entries as any other: nothing changes for them.
 */

/** The most holds one owner may have of one tag of a document at once. */
export const MAX_HOLDS = 64;

/**
 * An owner's first hold: its owner, and the document's fencing counter read before it (its entry
 * keeps the next value); without it, the entry's token is set by {@link holdFenceOperation} after.
 */
export interface OwnedAcquisition {
  readonly owner: string;
  readonly counter?: number;
}

/**
 * Set the token of an owner's first hold taken without a counter pin (the counter kept moving
 * between the read and the write): only while the entry is there without one. Until it is set,
 * the owner's other acquisitions cannot nest in it (they wait for it). It admits nobody.
 */
export function holdFenceOperation(paths: LockPaths, target: Document, tag: string, id: string, fence: number): LockOperation {
  return {
    filter: allOf(target, [{ [paths.tag(tag)]: { $elemMatch: { id, fence: { $exists: false } } } }]),
    update: { $set: { [`${paths.tag(tag)}.$[mine].fence`]: fence } },
    arrayFilters: [{ 'mine.id': id }],
  };
}

/** `$expr` filter: `owner` holds no entry of `tag` unexpired by the server's clock (an unpinned first hold may not become a second one). */
export function ownerHoldsNone(paths: LockPaths, tag: string, owner: string): Document {
  const live = { $filter: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', cond: { $and: [{ $eq: ['$$entry.owner', owner] }, ...entryUnexpired(paths)] } } };
  return { $expr: { $eq: [{ $size: live }, 0] } };
}

/** Filter: the document's fencing counter is `counter` (0: never locked). */
export function counterIs(paths: LockPaths, counter: number): Document {
  return { $expr: { $eq: [{ $ifNull: [`$${paths.fence}`, 0] }, counter] } };
}

/** A nested hold to send. */
export interface ReenterRequest {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** Every tag of the lock: the expired entries of the others are pruned. */
  readonly tags: Iterable<string>;
  /** The locked document (`{ _id }`). */
  readonly target: Document;
  readonly owner: string;
  /** The token of the owner's lock, which the new hold keeps. */
  readonly fence: number;
  /** The new hold: its id, its stamp (from the lower bound of the server's clock) and expiry. */
  readonly entry: StoredEntry;
  readonly tolerance: number;
}

/** `$expr` operand: the entries of `tag` held by `owner` with token `fence` that are unexpired by the server's clock (`$$NOW`). */
function ownerHolds(paths: LockPaths, tag: string, owner: string, fence: number): Document {
  const cond = { $and: [{ $eq: ['$$entry.owner', owner] }, { $eq: ['$$entry.fence', fence] }, ...entryUnexpired(paths)] };
  return { $filter: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', cond } };
}

/**
 * Re-enter: adds a hold for `owner`, which already holds the lock. Checks, in the filter, that an
 * entry of the owner with the lock's token is unexpired by `$$NOW`, that it has fewer than
 * {@link MAX_HOLDS} such entries, that every tag the rule asserts over is gone (a registration
 * still waiting for them is not a hold to nest in), no live quarantine mark, and the stamp (as an acquisition does). Writes
 * the new entry (with the same `owner` and `fence`), the server's clock and the latest expiry; it
 * does not move the fencing counter, extends no other hold, and bypasses the fair queue (the
 * owner holds the lock already: queueing behind waiters who wait for it could never end).
 *
 * Why it never admits a second holder: it only adds a hold while the same owner's hold is live
 * by the server's clock, so every live entry of the tag still belongs to one owner (or, for a
 * shared tag, to owners the tag admits together).
 */
export function reenterOperation(request: ReenterRequest): LockOperation {
  const { paths, rule, entry } = request;
  const held = ownerHolds(paths, rule.tag, request.owner, request.fence);
  const asserted = rule.assertive.map((other) => everyEntryDead(paths, other));
  const others = [...request.tags].filter((other) => other !== rule.tag);
  const stored: StoredEntry = { ...entry, owner: request.owner, fence: request.fence };
  return {
    filter: allOf(request.target, [
      notQuarantined(paths),
      { $expr: { $and: [{ $gt: [{ $size: held }, 0] }, { $lt: [{ $size: held }, MAX_HOLDS] }, stampWithin(entry.at, request.tolerance), ...asserted] } },
      ...(rule.exclusive ? [stampNotBeforeRecent(paths, rule.tag, entry.at)] : []),
    ]),
    update: mergeUpdates({
      $push: { [paths.tag(rule.tag)]: stored, ...(rule.exclusive ? recordStamp(paths, rule.tag, entry.at) : {}) },
      $currentDate: { [paths.now]: true },
      $max: { [paths.until]: entry.exp, ...recordJudged(paths, entry.at) },
      $pull: { ...pruneTags(paths, others, entry.at, true), ...pruneCommits(paths, entry.at) },
    }),
  };
}

/** The live holds of `owner` in `tag` at server time `now` (ms), not dead by the document's `judged` stamp, oldest first. */
export function holdsOf(lock: StoredLock, tag: string, owner: string, now: number): StoredEntry[] {
  return liveEntries(lock, tag, now)
    .filter((entry) => entry.owner === owner)
    .sort((a, b) => a.at.getTime() - b.at.getTime());
}
