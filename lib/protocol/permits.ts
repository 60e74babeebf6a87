import type { Document } from 'mongodb';
import type { TagRule } from './lock-data';
import { liveEntries, noLiveEntry, type LockPaths, type StoredLock } from './stored-format';
import { describeLimit, limitIs, limitNumber, limitRecord, sameLimit, windowOf } from './rate-window';

/**
 * Counting semaphores: a tag with a `limit` admits live locks holding at most `limit` permits in
 * all, each lock its own entry (id, lease, fencing token) with its `permits`. The limit is stored
 * in the document (`lock.limits.<tag>`), so that every process judges by the same number: a
 * caller configured with another limit is refused while permits are held, and the first
 * acquisition on a document without a live permit stores its own (how a limit is changed).
 */

/** `$expr` operand: the permits of `tag`'s entries unexpired at `at` (an entry without `permits` holds one). */
function usedAt(paths: LockPaths, tag: string, at: Date): Document {
  const live = { $filter: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', cond: { $gt: ['$$entry.exp', at] } } };
  return { $sum: { $map: { input: live, as: 'entry', in: { $ifNull: ['$$entry.permits', 1] } } } };
}

/**
 * What an acquisition of `permits` of a limited tag also checks, at the stamp `at`: every live
 * entry of the tag is a permit (one without `permits` was taken by a process that declares the tag
 * without a limit, exclusive or shared, whatever limit an earlier use left stored); the document's
 * limit is the caller's (or no permit of the tag is live, and the acquisition stores the caller's);
 * and the live permits plus these stay within it. With a `window` (a rate limit,
 * lib/protocol/rate-window.ts), the stored limit must have the same window.
 */
export function permitConditions(paths: LockPaths, rule: TagRule & { limit: number }, permits: number, at: Date, window?: number): Document[] {
  return [
    { [paths.tag(rule.tag)]: { $not: { $elemMatch: { exp: { $gt: at }, permits: { $exists: false } } } } },
    { $or: [limitIs(paths, rule.tag, rule.limit, window), noLiveEntry(paths, rule.tag, at)] },
    { $expr: { $lte: [{ $add: [usedAt(paths, rule.tag, at), permits] }, rule.limit] } },
  ];
}

/**
 * Why processes disagree on whether `rule`'s tag is limited, and by how much, as `lock` shows it
 * at server time `now` (ms), if they do: the refusal's detail (`LimitMismatch`). A limited caller
 * finds a live lock of the tag that is not a permit, or permits held under another limit; a caller
 * without a limit (exclusive or shared) finds live permits, or a shared one a limit stored while
 * locks of the tag are live. A rate limit's `window` is part of its limit: another one, or none, is a mismatch.
 */
export function limitMismatch(lock: StoredLock, rule: TagRule, now: number, window?: number): string | undefined {
  const { tag } = rule;
  const live = liveEntries(lock, tag, now);
  const permits = live.filter((entry) => entry.permits !== undefined);
  const stored = lock.limits?.[tag];
  const agree = 'processes sharing a document must agree whether a tag is limited, and by how much (a limit changes once no permit is held)';
  if (isLimited(rule) && permits.length < live.length) {
    return `${live.length - permits.length} lock(s) of tag ${tag} are held by a process that declares it without a limit (exclusive or shared), this lock's limit is ${rule.limit}: ${agree}`;
  }
  const used = usedPermits(lock, tag, now);
  const mismatched = isLimited(rule) ? used > 0 && !sameLimit(stored, rule.limit, window) : permits.length > 0 || (isUnlimitedShared(rule) && used > 0 && stored !== undefined);
  if (!mismatched) return undefined;
  const ours = rule.limit === undefined ? `(none${rule.exclusive ? ': exclusive' : ''})` : describeLimit(rule.limit, window);
  return `the document's ${used} held permit(s) of tag ${tag} were taken under limit ${describeLimit(limitNumber(stored), windowOf(stored))}, this lock's is ${ours}: ${agree}`;
}

/** What an acquisition of a limited tag also writes: the limit it was judged by (with a rate limit's window). */
export function recordLimit(paths: LockPaths, rule: TagRule & { limit: number }, window?: number): Document {
  return { $set: { [paths.limit(rule.tag)]: limitRecord(rule.limit, window) } };
}

/**
 * What an acquisition of a shared tag without a limit also checks, at the stamp: no limit is
 * stored for the tag, or no lock of it is live (processes sharing a document must agree that the
 * tag has a limit: one without would be counted against it).
 */
export function noStoredLimit(paths: LockPaths, tag: string, at: Date): Document {
  return { $or: [{ [paths.limit(tag)]: { $exists: false } }, noLiveEntry(paths, tag, at)] };
}

/** What it also writes: the stored limit removed (the filter proved it stale, or there was none). */
export function clearLimit(paths: LockPaths, tag: string): Document {
  return { $unset: { [paths.limit(tag)]: '' } };
}

/** True for a shared tag without a limit, which must not find a limit stored while its locks are live. */
export function isUnlimitedShared(rule: TagRule): boolean {
  return rule.limit === undefined && !rule.exclusive;
}

/** The permits of `tag` held in `lock` at server time `now` (ms). */
export function usedPermits(lock: StoredLock, tag: string, now: number): number {
  return liveEntries(lock, tag, now).reduce((sum, entry) => sum + (entry.permits ?? 1), 0);
}

/** True for a tag with a limit (a semaphore, or a multiLock tag in `limits`). */
export function isLimited(rule: TagRule): rule is TagRule & { limit: number } {
  return rule.limit !== undefined;
}
