import type { Document } from 'mongodb';
import type { LockOperation } from './operation';

/**
 * monglock v2's stored locks, which monglock 3 neither reads nor writes: writeLock's
 * `lock.active`/`lock.timestamp`, and multiLock's `lock.<tag>` arrays of `{ timestamp, id }`.
 * These operations remove them (sent with `updateMany`), leaving monglock 3's fields alone.
 */

/** Removes v2 writeLock fields from the documents matching `filter`. */
export function clearV2WriteLockOperation(field: string, filter: Document): LockOperation {
  const active = `${field}.active`;
  const timestamp = `${field}.timestamp`;
  return {
    filter: { $and: [filter, { $or: [{ [active]: { $exists: true } }, { [timestamp]: { $exists: true } }] }] },
    update: { $unset: { [active]: '', [timestamp]: '' } },
  };
}

/** Removes the v2 array of `tag`: only v2's arrays of `{ timestamp, id }` (or the empty array a v2 release leaves), never monglock 3's own fields. */
export function clearV2TagOperation(field: string, filter: Document, tag: string): LockOperation {
  const path = `${field}.${tag}`;
  const v2Array = { [path]: { $type: 'array' }, $or: [{ [path]: { $size: 0 } }, { [`${path}.timestamp`]: { $exists: true } }] };
  return { filter: { $and: [filter, v2Array] }, update: { $unset: { [path]: '' } } };
}
