import type { Document } from 'mongodb';
import type { TagRule } from './lock-data';
import { mergeUpdates, type LockOperation } from './operation';
import { proofMatch, type Proof } from './proofs';
import { allOf, entryLiveOnServer, hasEntry, everyEntryDead, recordCommit, type LockPaths, type StoredCommit } from './stored-format';
import { timestampUnique } from './recent-stamps';
import { keepEntryOperation } from './min-hold';

/** A release to send, with or without the caller's final update (a commit). */
export interface ReleaseRequest {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** The locked document (`{ _id }`), or the caller's filter (monglock v2's `release(filter, …)`). */
  readonly target: Document;
  /** Which lock: its id, or (monglock v2 writeLock) its acquisition timestamp. */
  readonly proof: Proof;
  /** The caller's final update, applied with the release (a commit). */
  readonly update?: Document;
  /** With `update`: what the document must also match (the array match of a positional `$` update). */
  readonly match?: Document;
  /** With `update`: the array filters of its `$[<identifier>]` paths. */
  readonly arrayFilters?: readonly Document[];
  /** The commit's record (for an id proof): how a commit whose reply was lost is settled. */
  readonly record?: StoredCommit;
  /** A plain release by id only: another tag the lock may be under (a conversion whose reply was lost). */
  readonly alsoTag?: string;
  /** An id proof's lock taken with `minHold`, released before its minimum hold ends (server time): the entry is kept until then (lib/protocol/min-hold.ts). */
  readonly keptUntil?: Date;
  /** With `keptUntil`: what the kept entry's fields become besides (a resource lock's group, renamed). */
  readonly keptFields?: Document;
  /** An id proof's lock passed back without minHoldUntil: removed (or committed under) only if its entry has no `hold`; one with a hold is released again keeping it (lib/engine/release.ts). */
  readonly holdAbsent?: boolean;
}

/**
 * Release: removes the lock `proof` names (also when its lease ran out, as long as it is still
 * there). It prunes nothing else: it has no stamp the server checked, and a bound it had not
 * checked (a time from a former primary, say) could remove a live entry.
 *
 * Commit (with `update`): the same update also applies the caller's final write and leaves the
 * commit's record, and matches only while the lock is unexpired by `$$NOW` and every tag it
 * asserts over is gone, and the document matches the caller's `match`: the write and the release
 * happen together or not at all. Its lock conditions are all in `$expr`, which matches no array
 * element: a positional `$` in the caller's update names the element of the caller's `match`.
 *
 * With `alsoTag` (a plain release by id), the lock is removed from either tag: a conversion whose
 * reply was lost may have moved it.
 *
 * With `keptUntil` (an id proof), the entry is not removed but kept until its minimum hold ends,
 * no longer a hold ({@link keepEntryOperation}), in the same update (with a commit's write too).
 *
 * A v2 timestamp proof must name exactly one lock of the tag (two taken in one ms cannot be told
 * apart). Why it never admits a second holder: it only removes the caller's own entry, or keeps it
 * as an entry that refuses what it refused, under an id no proof names.
 */
export function releaseOperation(request: ReleaseRequest): LockOperation {
  const { paths, rule, proof, update, record, alsoTag } = request;
  const match = proofMatch(proof);
  if (alsoTag !== undefined && alsoTag !== rule.tag && !update && 'id' in proof) {
    return {
      filter: allOf(request.target, [{ $or: [hasEntry(paths, rule.tag, match), hasEntry(paths, alsoTag, match)] }]),
      update: { $pull: { [paths.tag(rule.tag)]: match, [paths.tag(alsoTag)]: match } },
    };
  }
  const absent = request.holdAbsent && !request.keptUntil && 'id' in proof ? { ...match, hold: { $exists: false } } : undefined;
  const kept = request.keptUntil && 'id' in proof ? keepEntryOperation(paths, rule.tag, proof.id, request.keptUntil, request.keptFields) : undefined;
  const conditions = update
    ? [...onlyOne(paths, rule.tag, proof), ...commitConditions(paths, rule, proof), ...(request.match ? [request.match] : []), ...(absent && 'id' in proof ? [entryWithoutHold(paths, rule.tag, proof.id)] : [])]
    : [hasEntry(paths, rule.tag, absent ?? match), ...onlyOne(paths, rule.tag, proof)];
  const arrayFilters = [...(update && request.arrayFilters ? request.arrayFilters : []), ...(kept?.arrayFilters ?? [])];
  return {
    filter: allOf(request.target, kept ? [...conditions, kept.condition] : conditions),
    update: mergeUpdates(update, kept ? kept.update : { $pull: { [paths.tag(rule.tag)]: absent ?? match } }, record && { $push: recordCommit(paths, record) }),
    ...(arrayFilters.length > 0 && { arrayFilters }),
  };
}

/**
 * Forced release (monglock v2's `release(filter)` without a lock, writeLock only): empties the
 * tag's array. It can free a lock, never admit two holders.
 */
export function forcedReleaseOperation(paths: LockPaths, target: Document, tag: string): LockOperation {
  return { filter: target, update: { $set: { [paths.tag(tag)]: [] } } };
}

/**
 * Withdraw: removes the entry `id` of `tag`, only if it is still there. Settling a commit whose
 * reply was lost: once it matched, the commit (which matches only while the entry is there) can
 * no longer land, however late it arrives.
 */
export function withdrawOperation(paths: LockPaths, target: Document, tag: string, id: string): LockOperation {
  return { filter: allOf(target, [hasEntry(paths, tag, { id })]), update: { $pull: { [paths.tag(tag)]: { id } } } };
}

/**
 * Withdraw ({@link withdrawOperation}) in settling a lost commit; for a lock taken with minHold
 * (its hold ending at `keptUntil`), its entry is kept as a release before then keeps it
 * ({@link keepEntryOperation}: renamed, so the commit, which names its id, can no longer land
 * either), always: a permit of a rate limit is never removed before its window passed.
 */
export function withdrawOrKeepOperation(paths: LockPaths, target: Document, tag: string, id: string, keptUntil: Date | undefined): LockOperation {
  if (keptUntil === undefined) return withdrawOperation(paths, target, tag, id);
  const kept = keepEntryOperation(paths, tag, id, keptUntil);
  return { filter: allOf(target, [kept.condition]), update: kept.update, arrayFilters: kept.arrayFilters };
}

/**
 * Withdraw ({@link withdrawOperation}), only while the entry is live by the server's clock: what an
 * operator's release takes (`monglock release`). An entry whose lease ended holds nothing: it is
 * not reported released (the next acquisition prunes it).
 */
export function withdrawLiveOperation(paths: LockPaths, target: Document, tag: string, id: string): LockOperation {
  const { filter, update } = withdrawOperation(paths, target, tag, id);
  return { filter: allOf(filter, [{ $expr: entryLiveOnServer(paths, tag, { id }) }]), update };
}

/**
 * What a write carrying the caller's data must also check: the lock is unexpired by `$$NOW`, and
 * every tag it asserts over is gone (an assertive registration still waiting for readers may not
 * write under them).
 */
export function commitConditions(paths: LockPaths, rule: TagRule, proof: Proof): Document[] {
  const asserted = rule.assertive.map((other) => everyEntryDead(paths, other));
  const live = entryLiveOnServer(paths, rule.tag, proof);
  return [{ $expr: asserted.length > 0 ? { $and: [live, ...asserted] } : live }];
}

/** For a monglock v2 timestamp proof: the condition that it names exactly one lock of `tag`. */
export function onlyOne(paths: LockPaths, tag: string, proof: Proof): Document[] {
  return 'timestamp' in proof ? [{ $expr: timestampUnique(paths, tag, proof.timestamp) }] : [];
}

/**
 * For a commit of a lock passed back without minHoldUntil: its entry `id` of `tag` has no `hold`.
 * In `$expr`, as every other lock condition of a commit, so that it matches no array element: a
 * positional `$` in the caller's update names the element of the caller's `match` (a query operator
 * on the lock's array would make the query traverse two arrays, for which `$` is ambiguous).
 */
function entryWithoutHold(paths: LockPaths, tag: string, id: string): Document {
  return {
    $expr: { $in: [true, { $map: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', in: { $and: [{ $eq: ['$$entry.id', id] }, { $not: [{ $ifNull: ['$$entry.hold', false] }] }] } } }] },
  };
}
