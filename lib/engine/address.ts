import type { Document } from 'mongodb';
import { isPlainObject } from '../common/validation';

/**
 * How every write after an acquisition addresses the locked document: its `_id` and the values of
 * the collection's shard key fields (`shardKey`, dot paths), read from the acquisition's reply. On
 * a sharded collection, mongos 4.4–6.x refuses a findAndModify without the whole shard key (and
 * 7.0+ broadcasts it to every shard). A field the document lacks is addressed as `null`, which
 * matches a missing field, as the shard key index files it.
 */
export function addressOf(doc: Document, shardKey: readonly string[]): Document {
  const address: Document = { _id: doc._id };
  for (const path of shardKey) if (path !== '_id') address[path] = valueAt(doc, path) ?? null;
  return address;
}

/**
 * The part of a caller's filter that routes a write to its shard: each shard key field (`_id`
 * among them, if it is one) the filter names with a plain value (or `$eq`), at its top level;
 * nothing on a collection that is not sharded. What addresses a lock whose reply never came,
 * together with the lock's id (which finds it wherever the filter now points).
 */
export function addressFromFilter(filter: Document, shardKey: readonly string[]): Document {
  const address: Document = {};
  for (const path of shardKey) {
    const value = equalityValue(filter[path]);
    if (value !== undefined) address[path] = value;
  }
  return address;
}

/** A filter condition's value when it is an equality (`v` or `{ $eq: v }`), else undefined. */
function equalityValue(condition: unknown): unknown {
  if (condition === undefined) return undefined;
  if (!isPlainObject(condition)) return condition;
  const keys = Object.keys(condition);
  if (keys.length === 1 && keys[0] === '$eq') return condition.$eq;
  return keys.some((key) => key.startsWith('$')) ? undefined : condition;
}

/** The value at a dot path of `doc` (shard key fields hold no arrays). */
function valueAt(doc: Document, path: string): unknown {
  let value: unknown = doc;
  for (const part of path.split('.')) {
    if (!isPlainObject(value)) return undefined;
    value = value[part];
  }
  return value;
}
