import type { Document } from 'mongodb';
import { compareBson } from '../common/bson-order';
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
 * among them, if it is one) the filter names by an equality, where mongos finds one; nothing on a
 * collection that is not sharded. What addresses a lock whose reply never came, together with the
 * lock's id (which finds it wherever the filter now points). Only values the filter implies: a
 * field it names by two values that differ (no document matches) is left out.
 */
export function addressFromFilter(filter: Document, shardKey: readonly string[]): Document {
  const address: Document = {};
  for (const path of shardKey) {
    const [value, ...others] = equalitiesOn(filter, path);
    if (value !== undefined && others.every((other) => compareBson(other, value) === 0)) address[path] = value;
  }
  return address;
}

/**
 * The values `filter` names `path` by, exactly, with a plain value or `$eq`: at its top level and
 * in the clauses of its top-level `$and` (and of theirs), where mongos finds a shard key. Every
 * one is implied by the filter; nothing under `$or`, `$nor`, `$not`, an operator or a parent path.
 */
function equalitiesOn(filter: Document, path: string): unknown[] {
  const own = equalityValue(filter[path]);
  const clauses: unknown[] = Array.isArray(filter.$and) ? filter.$and : [];
  return [...(own === undefined ? [] : [own]), ...clauses.flatMap((clause) => (isPlainObject(clause) ? equalitiesOn(clause, path) : []))];
}

/**
 * A filter condition's value when it is an equality (`v` or `{ $eq: v }`), else undefined: never a
 * regular expression (a pattern, not a value), nor a document with an operator's name (a filter
 * made of it would read it as one).
 */
function equalityValue(condition: unknown): unknown {
  if (condition === undefined) return undefined;
  const value = isPlainObject(condition) && Object.keys(condition).length === 1 && '$eq' in condition ? condition.$eq : condition;
  if (value instanceof RegExp || (value as { _bsontype?: unknown } | null)?._bsontype === 'BSONRegExp') return undefined;
  return isPlainObject(value) && Object.keys(value).some((key) => key.startsWith('$')) ? undefined : value;
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
