import type { Document } from 'mongodb';
import type { LockPaths } from './stored-format';

/*
 * An exclusive tag keeps its last two acquisition stamps (`lock.recent.<tag>`): its stamps never
 * decrease, and a monglock v2 timestamp proof names a lock only if it names exactly one.
 */

/**
 * Filter: `stamp` is not earlier than the exclusive `tag`'s previous acquisition, so that its
 * stamps never decrease and all acquisitions stamped in one ms are consecutive (see
 * {@link timestampUnique}).
 */
export function stampNotBeforeRecent(paths: LockPaths, tag: string, stamp: Date): Document {
  return { [paths.recent(tag)]: { $not: { $elemMatch: { $gt: stamp } } } };
}

/** Update: records `stamp` as the exclusive `tag`'s newest acquisition, keeping the last two. */
export function recordStamp(paths: LockPaths, tag: string, stamp: Date): Document {
  return { [paths.recent(tag)]: { $each: [stamp], $slice: -2 } };
}

/**
 * `$expr` operand: at most one acquisition of the exclusive `tag` was stamped in the ms
 * `timestamp`. Stamps never decrease, so two locks of one ms are the last two acquisitions;
 * a monglock v2 timestamp proof is accepted only when it names exactly one lock.
 */
export function timestampUnique(paths: LockPaths, tag: string, timestamp: number): Document {
  const sameMs = {
    $filter: {
      input: { $ifNull: [`$${paths.recent(tag)}`, []] },
      as: 'stamp',
      cond: { $and: [{ $gte: ['$$stamp', new Date(timestamp)] }, { $lt: ['$$stamp', new Date(timestamp + 1)] }] },
    },
  };
  return { $lt: [{ $size: sameMs }, 2] };
}
