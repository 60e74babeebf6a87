import type { Document } from 'mongodb';
import type { TagRule } from './lock-data';
import { mergeUpdates, type LockOperation } from './operation';
import { clearLimit, isLimited, isUnlimitedShared, noStoredLimit, permitConditions, recordLimit } from './permits';
import {
  allOf,
  entryLiveOnServer,
  noLiveEntry,
  pruneCommits,
  pruneTags,
  recordJudged,
  stampWithin,
  type LockPaths,
  type StoredEntry,
  type StoredLock,
  type StoredUpgrade,
} from './stored-format';
import { recordStamp, stampNotBeforeRecent } from './recent-stamps';
import { notQuarantined } from './quarantine';

/**
 * Converting a held multiLock lock to another tag (read → write, write → read) in one update, and
 * the pending upgrade that gives a waiting conversion writer preference. A conversion never
 * registers beside the locks it waits for (unlike an assertive acquisition): it waits for every
 * tag its new tag is cooperative with or asserts over. While it waits, its holder marks the
 * document (`lock.upgrade`, at most one live mark per document), and new acquisitions of those
 * tags are refused, so that a stream of readers cannot starve it; a second holder that would wait
 * for the first one's conversion while the first waits for it is refused at once instead.
 */

/** The tags a conversion to `rule` waits for to be gone: those it is cooperative with or asserts over. */
export function conversionWaitsFor(rule: TagRule): readonly string[] {
  return [...new Set([...rule.cooperative, ...rule.assertive])];
}

/** The tags whose holders a conversion to `rule` may wait for: {@link conversionWaitsFor}, and its own when it has a limit (for a permit). */
export function conversionBlockedBy(rule: TagRule): readonly string[] {
  return rule.limit === undefined ? conversionWaitsFor(rule) : [...conversionWaitsFor(rule), rule.tag];
}

/** A conversion to send. */
export interface ConvertRequest {
  readonly paths: LockPaths;
  readonly from: TagRule;
  readonly to: TagRule;
  /** Every tag of the lock: the expired entries of the others are pruned. */
  readonly tags: Iterable<string>;
  /** The locked document (`{ _id }`). */
  readonly target: Document;
  /** The lock's id, which it keeps, and its new stamp and expiry. */
  readonly entry: StoredEntry;
  readonly tolerance: number;
  /** Tags whose pending upgrade (by another holder) this conversion may not slip in ahead of. */
  readonly yieldsToUpgradesOf: readonly string[];
}

/** Filter: no entry of `tag` but `id` is unexpired at `stamp`. */
function noOtherLiveEntry(paths: LockPaths, tag: string, stamp: Date, id: string): Document {
  return { [paths.tag(tag)]: { $not: { $elemMatch: { exp: { $gt: stamp }, id: { $ne: id } } } } };
}

/** Filter: no other holder's upgrade to one of `tags` is pending (its mark unexpired at `stamp`). */
export function noPendingUpgrade(paths: LockPaths, tags: readonly string[], stamp: Date, mine?: string): Document {
  return { [paths.upgrade]: { $not: { $elemMatch: { exp: { $gt: stamp }, tag: { $in: [...tags] }, ...(mine === undefined ? {} : { id: { $ne: mine } }) } } } };
}

/**
 * Convert: moves the lock `entry.id` from `from.tag` to `to.tag`, keeping its id, with a new stamp,
 * expiry and fencing token (+1 on the document's counter). Checks, in the filter: the lock is in
 * `from` and unexpired by `$$NOW`; at the stamp, no entry but its own of a tag the new one waits
 * for ({@link conversionWaitsFor}); the stamp (as an acquisition does); the new tag's limit; and
 * no other holder's pending upgrade that the new tag would hold up; no live quarantine mark (a
 * conversion is an acquisition of its new tag). Writes the move, the new
 * token, the server's clock and the latest expiry, and takes its own upgrade mark out.
 *
 * Why it never admits a second holder: the new tag's checks are an acquisition's, made at a stamp
 * the server has passed, with the holder's own entry as the only exception, and the old entry is
 * removed by the same update: at no instant is the document free of this holder's lock, nor held
 * by a lock the new tag excludes.
 */
export function convertOperation(request: ConvertRequest): LockOperation {
  const { paths, from, to, entry } = request;
  const at = entry.at;
  const others = [...request.tags].filter((other) => other !== from.tag && other !== to.tag);
  const limited = isLimited(to) ? to : undefined;
  const stored: StoredEntry = limited ? { ...entry, permits: 1 } : entry;
  return {
    filter: allOf(request.target, [
      notQuarantined(paths),
      { $expr: { $and: [entryLiveOnServer(paths, from.tag, { id: entry.id }), stampWithin(at, request.tolerance)] } },
      ...conversionWaitsFor(to).map((tag) => (tag === from.tag ? noOtherLiveEntry(paths, tag, at, entry.id) : noLiveEntry(paths, tag, at))),
      ...(to.exclusive ? [stampNotBeforeRecent(paths, to.tag, at)] : []),
      ...(limited ? permitConditions(paths, limited, 1, at) : isUnlimitedShared(to) ? [noStoredLimit(paths, to.tag, at)] : []),
      ...(request.yieldsToUpgradesOf.length > 0 ? [noPendingUpgrade(paths, request.yieldsToUpgradesOf, at, entry.id)] : []),
    ]),
    update: mergeUpdates(
      {
        $inc: { [paths.fence]: 1 },
        $currentDate: { [paths.now]: true },
        $max: { [paths.until]: entry.exp, ...recordJudged(paths, at) },
        ...(to.exclusive ? { $set: { [paths.tag(to.tag)]: [stored] }, $push: recordStamp(paths, to.tag, at) } : { $push: { [paths.tag(to.tag)]: stored } }),
        $pull: { [paths.tag(from.tag)]: { id: entry.id }, [paths.upgrade]: { id: entry.id }, ...pruneTags(paths, others, at, true), ...pruneCommits(paths, at) },
      },
      limited && recordLimit(paths, limited),
      isUnlimitedShared(to) ? clearLimit(paths, to.tag) : undefined,
    ),
  };
}

/**
 * Mark a pending upgrade: the holder of lock `mark.id` of `from` waits to convert to `mark.tag`.
 * Checks that the lock is in `from` and unexpired by `$$NOW`, the stamp, and that no other
 * holder's mark is live at it (one pending upgrade per document: two would wait for each other).
 * Replaces the document's mark (any other is expired). It only refuses acquisitions; it admits none.
 */
export function markUpgradeOperation(paths: LockPaths, target: Document, from: string, mark: StoredUpgrade, at: Date, tolerance: number): LockOperation {
  return {
    filter: allOf(target, [
      { $expr: { $and: [entryLiveOnServer(paths, from, { id: mark.id }), stampWithin(at, tolerance)] } },
      { [paths.upgrade]: { $not: { $elemMatch: { exp: { $gt: at }, id: { $ne: mark.id } } } } },
    ]),
    update: { $set: { [paths.upgrade]: [mark] }, $currentDate: { [paths.now]: true }, $max: { [paths.until]: mark.exp } },
  };
}

/** Drop a pending upgrade: its holder gave up waiting. */
export function dropUpgradeOperation(paths: LockPaths, target: Document, id: string): LockOperation {
  return { filter: target, update: { $pull: { [paths.upgrade]: { id } } } };
}

/** The pending upgrade of `lock` live at server time `now` (ms), if any. */
export function pendingUpgrade(lock: StoredLock, now: number): StoredUpgrade | undefined {
  return (lock.upgrade ?? []).find((mark) => mark.exp instanceof Date && mark.exp.getTime() > now);
}
