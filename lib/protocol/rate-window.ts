import type { Document } from 'mongodb';
import type { LockPaths } from './stored-format';
import { recordStamp, stampNotBeforeRecent } from './recent-stamps';

/**
 * Rate limits: a tag with a limit K whose permits are taken with `minHold` W (a semaphore's
 * `acquire(filter, { minHold })`) admits at most K permits whose acquisition stamps lie within
 * any W ms. Each permit's entry stays until its stamp + W at least (a release before then keeps it,
 * lib/protocol/min-hold.ts), so an acquisition stamped `at` counts every permit stamped after
 * `at - W`. The window is stored with the limit (`limits.<tag>: { limit, window }`): every process
 * judges by the same one, and a process with another window, or none (a plain limit, an older
 * version), is refused while permits are live, as one with another limit is. The tag's stamps
 * never decrease (`recent.<tag>`, as an exclusive tag's), so that an entry pruned at a stamp
 * (expired by it) can never be counted by a later acquisition stamped before that.
 */

/** A limit as stored: its number, or with the window of a rate limit. */
export type StoredLimit = number | { readonly limit: number; readonly window: number };

/** What a limited acquisition stores: `limit`, or `{ limit, window }` with a window (ms). */
export function limitRecord(limit: number, window: number | undefined): StoredLimit {
  return window === undefined ? limit : { limit, window };
}

/** Filter: the stored limit of `tag` is `limit` with this window (none: a plain number). Dot paths, so the order of stored fields does not matter. */
export function limitIs(paths: LockPaths, tag: string, limit: number, window: number | undefined): Document {
  const path = paths.limit(tag);
  return window === undefined ? { [path]: limit } : { [`${path}.limit`]: limit, [`${path}.window`]: window };
}

/** True when `stored` is `limit` with this window (none: a plain number). */
export function sameLimit(stored: unknown, limit: number | undefined, window: number | undefined): boolean {
  if (window === undefined || limit === undefined) return stored === limit;
  return typeof stored === 'object' && stored !== null && (stored as { limit?: unknown }).limit === limit && (stored as { window?: unknown }).window === window;
}

/** The number of a stored limit (null: none stored). */
export function limitNumber(stored: unknown): number | null {
  if (typeof stored === 'number') return stored;
  const limit = typeof stored === 'object' && stored !== null ? (stored as { limit?: unknown }).limit : undefined;
  return typeof limit === 'number' ? limit : null;
}

/** The window of a stored limit, in ms (undefined: a plain limit). */
export function windowOf(stored: unknown): number | undefined {
  const window = typeof stored === 'object' && stored !== null ? (stored as { window?: unknown }).window : undefined;
  return typeof window === 'number' ? window : undefined;
}

/** A limit for a message: `4`, `4 per 1000 ms`, `(none)`. */
export function describeLimit(limit: number | null | undefined, window: number | undefined): string {
  if (limit === null || limit === undefined) return '(none)';
  return window === undefined ? `${limit}` : `${limit} per ${window} ms`;
}

/** Filter: a rate-limited acquisition's stamp is not before the tag's latest (its stamps never decrease). */
export function windowStampConditions(paths: LockPaths, tag: string, at: Date): Document[] {
  return [stampNotBeforeRecent(paths, tag, at)];
}

/** Update (`$push`): records a rate-limited acquisition's stamp as the tag's latest. */
export function recordWindowStamp(paths: LockPaths, tag: string, at: Date): Document {
  return { $push: recordStamp(paths, tag, at) };
}

/**
 * The time at which an acquisition prunes its own shared tag's expired entries: the server's time
 * its reply showed (`now`), or for a rate limit (a `window`) its stamp, never later: its later
 * acquisitions, stamped no earlier, must count every entry live at their stamps.
 */
export function prunedAt(window: number | undefined, now: number, stamp: number): number {
  return window === undefined ? now : stamp;
}
