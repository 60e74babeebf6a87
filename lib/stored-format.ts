import type { Document } from 'mongodb';

/**
 * The lock as stored in a document, under `options.field` (default `lock`):
 *
 * ```
 * lock: {
 *   fence: 7,                       // fencing counter: +1 per acquisition, never reset
 *   tags: {
 *     write: [ { id: '9f…', at: ISODate, exp: ISODate } ],   // one array per tag
 *     read:  [ { id: '1c…', at: ISODate, exp: ISODate }, … ]
 *   }
 * }
 * ```
 *
 * `id` is 128 random bits (hex), `at` the acquisition stamp and `exp` the expiry, both in the
 * server's time. writeLock is the tag `write`, cooperative with itself, so writeLock and multiLock
 * share this format and never overwrite each other's entries.
 */
export interface StoredEntry {
  id: string;
  at: Date;
  exp: Date;
}

/** The stored lock property. */
export interface StoredLock {
  fence?: number;
  /** Resource documents only: the fence base set when the document is created (ms x 1000). */
  epoch?: number;
  tags?: Record<string, StoredEntry[] | undefined>;
}

/** Dot paths into the stored lock property. */
export class LockPaths {
  readonly fence: string;

  constructor(readonly field: string) {
    this.fence = `${field}.fence`;
  }

  /** The array of a tag's entries. */
  tag(tag: string): string {
    return `${this.field}.tags.${tag}`;
  }

  /** The stored lock of a document returned by the server. */
  read(doc: Document | null | undefined): StoredLock {
    const value: unknown = doc?.[this.field];
    return typeof value === 'object' && value !== null ? (value as StoredLock) : {};
  }
}

/** Entries of `tag` in `lock` that are unexpired at `stamp` (ms). */
export function liveEntries(lock: StoredLock, tag: string, stamp: number): StoredEntry[] {
  const entries = lock.tags?.[tag];
  if (!Array.isArray(entries)) return [];
  return entries.filter((entry) => entry.exp instanceof Date && entry.exp.getTime() > stamp);
}

/** True when `tag`'s array holds an entry that expired at or before `stamp`. */
export function hasExpiredEntries(lock: StoredLock, tag: string, stamp: number): boolean {
  const entries = lock.tags?.[tag];
  return Array.isArray(entries) && entries.some((entry) => !(entry.exp instanceof Date) || entry.exp.getTime() <= stamp);
}

/** Filter: no entry of `tag` is unexpired at `stamp`. (`$not` + `$elemMatch`: a dot path would match any element.) */
export function noLiveEntry(paths: LockPaths, tag: string, stamp: Date): Document {
  return { [paths.tag(tag)]: { $not: { $elemMatch: { exp: { $gt: stamp } } } } };
}

/** Filter: `tag` holds an entry matching `match`. */
export function hasEntry(paths: LockPaths, tag: string, match: Document): Document {
  return { [paths.tag(tag)]: { $elemMatch: match } };
}

/**
 * `$expr` operand: `tag` holds the entry identified by `proof` (its id, or its acquisition ms),
 * unexpired by the server's clock (`$$NOW`).
 */
export function entryLiveOnServer(paths: LockPaths, tag: string, proof: { id: string } | { timestamp: number }): Document {
  const identifies =
    'id' in proof
      ? { $eq: ['$$entry.id', proof.id] }
      : { $and: [{ $gte: ['$$entry.at', new Date(proof.timestamp)] }, { $lt: ['$$entry.at', new Date(proof.timestamp + 1)] }] };
  return {
    $in: [
      true,
      {
        $map: {
          input: { $ifNull: [`$${paths.tag(tag)}`, []] },
          as: 'entry',
          in: { $and: [identifies, { $gt: ['$$entry.exp', '$$NOW'] }] },
        },
      },
    ],
  };
}

/** `$expr` operand: the stamp lies within `[$$NOW - toleranceMs, $$NOW]` by the server's clock. */
export function stampWithin(stamp: Date, toleranceMs: number): Document {
  return { $and: [{ $lte: [stamp, '$$NOW'] }, { $gte: [stamp, { $subtract: ['$$NOW', toleranceMs] }] }] };
}

/**
 * `filter` and `conditions` combined with `$and` at the top level, leaving the caller's own fields
 * (its `_id`, say) where query planners look for them. The caller's object is not changed.
 */
export function allOf(filter: Document, conditions: Document[]): Document {
  if (filter.$and === undefined) return { ...filter, $and: conditions };
  if (Array.isArray(filter.$and)) return { ...filter, $and: [...(filter.$and as Document[]), ...conditions] };
  return { $and: [filter, ...conditions] }; // an invalid $and of the caller's: the server says so
}

/** Update: remove the entries of each tag that expired at or before `stamp` (a stamp the server has passed). */
export function pruneTags(paths: LockPaths, tags: Iterable<string>, stamp: Date): Document {
  const pull: Document = {};
  for (const tag of tags) pull[paths.tag(tag)] = { exp: { $lte: stamp } };
  return pull;
}
