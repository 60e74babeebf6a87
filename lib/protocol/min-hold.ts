import type { Document } from 'mongodb';
import type { LockOperation } from './operation';
import type { LockPaths } from './stored-format';

/**
 * Minimum hold (`minHold`, ShedLock's `lockAtLeastFor`): a lock taken with it stores the end of
 * its minimum hold in its entry (`hold`: its acquisition stamp `at` plus `minHold`, server time).
 * A release before that end leaves the entry in the document until then, no longer a hold: it
 * gets another id (see {@link keptId}), so nothing that names the lock by its proof (a guarded
 * write, an extension, a commit, a second release, a conversion, a hand-over) finds it, and its
 * owner is taken out (its owner cannot nest in it). Its `exp` becomes the minimum hold's end, so
 * every acquisition that a live entry of its tag refuses is refused until then, as by a held lock,
 * and it lapses at that end without any write, as a lease does.
 */

/** The array filter name of the entry a release keeps. */
const KEPT = 'keptEntry';

/** What a kept entry's id ends with: a suffix no proof can carry (a lock id passed back has no `:`). */
const KEPT_SUFFIX = ':kept';

/** The id a kept entry gets: the lock's, with {@link KEPT_SUFFIX}. */
export function keptId(id: string): string {
  return `${id}${KEPT_SUFFIX}`;
}

/**
 * `lock` released as a lock no caller held (an abandoned acquisition's, one whose reply came too
 * late, one refused for clocks too far apart): its entry is removed, not kept. Its caller never
 * ran under it, so it is no run of a job and no call of a rate limit; the permits a window counts
 * are those handed to callers.
 */
export function withoutMinHold<T extends { readonly minHoldUntil?: number | undefined }>(lock: T): T {
  if (lock.minHoldUntil === undefined) return lock;
  return { ...lock, minHoldUntil: undefined };
}

/** True for the id of an entry a release kept ({@link keptId}). */
export function isKeptId(id: string): boolean {
  return id.endsWith(KEPT_SUFFIX);
}

/** The stored fields of a lock taken with `minHold`: the end of its minimum hold, `holdUntil`. */
export function minHoldEntry(holdUntil: Date | undefined): { hold?: Date } {
  return holdUntil === undefined ? {} : { hold: holdUntil };
}

/**
 * What a release that leaves its entry writes instead of removing it, for the entry `id` of `tag`
 * whose minimum hold ends at `hold` (the value its acquisition stored, which the filter requires:
 * the end is the stored stamp plus `minHold`, never the client's clock): the entry renamed and
 * marked `kept`, its owner removed, its `exp` lowered to `hold` (`$min`: never past its lease), and
 * the kind's `fields` set (a resource lock's group renamed: `unlock` and `renew` by it leave it).
 * The filter also requires the entry with that end, in `$expr` (which matches no array element,
 * so a commit's positional `$` still names the element of the caller's `match`). The array filter
 * matches the entry by its id before or after the rename: servers differ in whether an update's
 * operators see the array as it was or as the earlier ones left it.
 */
export function keepEntryOperation(paths: LockPaths, tag: string, id: string, hold: Date, fields: Document = {}): Required<Pick<LockOperation, 'update' | 'arrayFilters'>> & { condition: Document } {
  const path = `${paths.tag(tag)}.$[${KEPT}]`;
  return {
    condition: {
      $expr: { $in: [true, { $map: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', in: { $and: [{ $eq: ['$$entry.id', id] }, { $eq: ['$$entry.hold', hold] }] } } }] },
    },
    update: {
      $set: { [`${path}.id`]: keptId(id), [`${path}.kept`]: true, ...Object.fromEntries(Object.entries(fields).map(([key, value]) => [`${path}.${key}`, value])) },
      $min: { [`${path}.exp`]: hold },
      $unset: { [`${path}.owner`]: '' },
    },
    arrayFilters: [{ [`${KEPT}.id`]: { $in: [id, keptId(id)] } }],
  };
}

/**
 * True when a release of a lock must leave its entry: whenever it was taken with minHold (`hold`,
 * server ms), whatever this client's clock says. The client's bounds on the server's clock are no
 * proof that the server's has passed `hold` (a local clock that stepped forward, a failover to a
 * primary whose clock is behind): an entry kept after its end is harmless, since its `exp` is
 * lowered to `hold` (`$min`) and it lapses there without any write, pruned or replaced as any
 * expired entry is. A rate limit's permit always kept its entry, for the same reason.
 */
export function releaseKeepsEntry(hold: number | undefined): hold is number {
  return hold !== undefined;
}

/** True when `tag`'s stored entries include one taken with `minHold` (a `hold`): its own prune must then be at the acquisition's stamp, not the server's later now, which could remove an entry that an acquisition of another tag, stamped before it, still had to count. */
export function holdsMinHold(entries: ReadonlyArray<{ readonly hold?: unknown }> | undefined): boolean {
  return Array.isArray(entries) && entries.some((entry) => entry.hold !== undefined);
}
