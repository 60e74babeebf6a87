import type { Collection, Document } from 'mongodb';
import type { BoomLike } from './errors';
import type { WriteConcernW } from './options';

/*
 * The checks every argument passes before anything is written: each throws a TypeError or
 * RangeError that names the argument and says what was expected.
 */

/** Largest lease, timeout or wait in ms: what a Node timer can hold (about 24.8 days). */
export const MAX_MS = 2 ** 31 - 1;

/** A name that is safe as one field of an update path: letters, digits, `_` and `-`, 1 to 64 of them. */
export const SAFE_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const FORBIDDEN_NAMES = new Set(['__proto__', 'constructor', 'prototype', 'hasOwnProperty', 'toString', 'valueOf']);

/** Describes a value for an error message: `abc` (string). */
export function describe(value: unknown): string {
  if (isThenable(value)) return 'a Promise (did you forget `await`?)';
  let shown: string;
  try {
    if (typeof value === 'string') shown = value;
    else if (typeof value === 'bigint') shown = `${value}n`;
    else if (typeof value === 'number') shown = String(value);
    else shown = JSON.stringify(value) ?? String(value);
  } catch {
    shown = Object.prototype.toString.call(value);
  }
  if (shown.length > 60) shown = `${shown.slice(0, 57)}...`;
  const kind = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  return `\`${shown}\` (${kind})`;
}

/** True for a Promise (any object with a `then` method): a value a forgotten `await` passes. */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

/** True for a non-null object that is not an array. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The `_id` that `filter` names by equality (a string, number, ObjectId, Date, …), if any: never an
 * operator object, an embedded document (its match depends on field order), an array, a regular
 * expression or null.
 */
export function idNamedBy(filter: Document): unknown {
  const id: unknown = filter._id;
  if (id === undefined || id === null || id instanceof RegExp || Array.isArray(id)) return undefined;
  if (typeof id === 'object' && (Object.getPrototypeOf(id) === Object.prototype || (id as { _bsontype?: unknown })._bsontype === 'BSONRegExp')) return undefined;
  return id;
}

/**
 * True when `filter` is `{ _id }` with a value {@link idNamedBy} accepts, and otherwise names only
 * fields of the collection's `shardKey` by a plain value: it addresses one document, whatever the
 * document becomes (a document's shard key values route it; they are not the lock's to change).
 */
export function namesOneDocument(filter: Document, shardKey: readonly string[] = []): boolean {
  if (idNamedBy(filter) === undefined) return false;
  return Object.entries(filter).every(([key, value]) => key === '_id' || (shardKey.includes(key) && isPlainValue(value)));
}

/** A value a filter matches by equality as it stands: not an operator object nor an embedded document. */
function isPlainValue(value: unknown): boolean {
  return typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype;
}

/** Throws a TypeError unless `value` is a plain object. */
export function expectObject(name: string, value: unknown): Record<string, unknown> {
  if (!isPlainObject(value)) throw new TypeError(`Expected \`${name}\` to be an object, got ${describe(value)}`);
  return value;
}

/** `maxHold` of `using()` and hapi routes: ms (at least 1), or `Infinity` for no ceiling; the default when undefined. */
export function expectMaxHold(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (value === Infinity) return Infinity;
  return expectMs(name, value);
}

/** Throws unless `value` is an owner id: a string of 1 to 256 characters. */
export function expectOwner(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 256) throw new TypeError(`Expected \`${name}\` to be an owner id (a string of 1 to 256 characters), got ${describe(value)}`);
  return value;
}

/** Throws unless `value` is a whole number of permits from 1 to `limit`. */
export function expectPermits(name: string, value: unknown, limit: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new TypeError(`Expected \`${name}\` to be a whole number of permits, got ${describe(value)}`);
  if (value < 1 || value > limit) throw new RangeError(`Expected \`${name}\` to be between 1 and ${limit}, got ${describe(value)}`);
  return value;
}

/** Throws unless `value` is an integer in [min, MAX_MS]. */
export function expectMs(name: string, value: unknown, min = 1): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new TypeError(`Expected \`${name}\` to be an integer number of ms, got ${describe(value)}`);
  }
  if (value < min || value > MAX_MS) {
    throw new RangeError(`Expected \`${name}\` to be between ${min} and ${MAX_MS} ms, got ${describe(value)}`);
  }
  return value;
}

/**
 * Query operators a lock filter may not use: MongoDB evaluates them in `find`/`findAndModify` but
 * refuses them in an aggregation `$match`, which is how a refused acquisition is explained.
 */
const UNEXPLAINABLE_OPERATORS = ['$where', '$near', '$nearSphere'];

/** Throws unless `value` is a filter object without operators a refusal could not be explained with. */
export function expectFilter(name: string, value: unknown): Record<string, unknown> {
  const filter = expectObject(name, value);
  const found = findOperator(filter, UNEXPLAINABLE_OPERATORS, 0);
  if (found) {
    throw new TypeError(
      `Expected \`${name}\` not to use \`${found}\`: MongoDB refuses it in the aggregation \`$match\` that explains a refused lock; ` +
        'select the document with other operators (for `$where`, `$expr` does the same)',
    );
  }
  return filter;
}

function findOperator(value: unknown, operators: readonly string[], depth: number): string | undefined {
  if (depth > 32 || typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (const item of value) {
      const found = findOperator(item, operators, depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return undefined; // BSON values, dates
  for (const [key, child] of Object.entries(value)) {
    if (operators.includes(key)) return key;
    const found = findOperator(child, operators, depth + 1);
    if (found) return found;
  }
  return undefined;
}

/**
 * Throws unless `value` is an update of update operators (`{ $set: …, $inc: … }`) that leaves
 * the lock's own `field` (and `_id`) alone: it is applied in the same write that releases or
 * extends the lock. Replacement documents and aggregation pipelines are refused.
 */
export function expectUpdate(name: string, value: unknown, field: string): Record<string, Record<string, unknown>> {
  const update = expectObject(name, value);
  const operators = Object.keys(update);
  if (operators.length === 0) throw new TypeError(`Expected \`${name}\` to have at least one update operator, got \`{}\``);
  for (const operator of operators) {
    if (!operator.startsWith('$')) {
      throw new TypeError(`Expected \`${name}\` to be update operators ($set, $inc, ...), got the field \`${operator}\` (replacement documents and pipelines are refused)`);
    }
    const fields = expectObject(`${name}.${operator}`, update[operator]);
    const paths = [...Object.keys(fields), ...(operator === '$rename' ? Object.values(fields).map(String) : [])];
    const touched = paths.find((path) => path === '_id' || path === field || path.startsWith(`${field}.`) || path.startsWith('_id.'));
    if (touched !== undefined) throw new TypeError(`Expected \`${name}\` not to change \`${touched}\`: it belongs to the lock (or is the document's _id)`);
  }
  return update as Record<string, Record<string, unknown>>;
}

/**
 * The projection of the document an acquisition returns: `true` the whole document, or a
 * projection object (inclusion or exclusion). The lock's `field` is always read, to know the
 * lock; it is removed from what the caller gets unless the caller asked for it.
 */
export function expectDocumentOption(name: string, value: unknown, field: string): Record<string, unknown> | true | undefined {
  if (value === undefined || value === false) return undefined;
  if (value === true) return true;
  const projection = expectObject(name, value);
  for (const [path, mode] of Object.entries(projection)) {
    if (![0, 1, true, false].includes(mode as number | boolean)) {
      throw new TypeError(`Expected \`${name}.${path}\` to be 0 or 1 (or true/false), got ${describe(mode)}`);
    }
    if ((path === field || path.startsWith(`${field}.`)) && !mode) throw new TypeError(`Expected \`${name}\` not to exclude \`${path}\`: the lock is read from it`);
  }
  return projection;
}

/** Throws unless `value` is a time in ms since the epoch (a non-negative safe integer). */
export function expectTimestamp(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`Expected \`${name}\` to be a lock's timestamp (ms since the epoch), got ${describe(value)}`);
  }
  return value;
}

/**
 * Throws unless `value` is safe as a field name inside an update path: letters, digits, `_` and
 * `-` only (so never `$` or `.`), at most 64 characters, and not an Object prototype name.
 */
export function expectSafeName(name: string, value: unknown): string {
  if (typeof value !== 'string' || !SAFE_NAME.test(value) || FORBIDDEN_NAMES.has(value)) {
    throw new TypeError(
      `Expected \`${name}\` to be 1-64 letters, digits, \`_\` or \`-\` (not a prototype name), got ${describe(value)}`,
    );
  }
  return value;
}

/**
 * Throws unless `value` is a shard key pattern as `sh.shardCollection` takes it: an object of 1 to
 * 32 field paths (no `$`, no empty part, not the lock's own path), each `1`, `-1` or `'hashed'`.
 */
export function expectShardKey(name: string, value: unknown): Readonly<Record<string, 1 | -1 | 'hashed'>> {
  if (!isPlainObject(value) || Object.keys(value).length === 0 || Object.keys(value).length > 32) {
    throw new TypeError(`Expected \`${name}\` to be a shard key pattern such as \`{ region: 1, _id: 1 }\`, got ${describe(value)}`);
  }
  for (const [path, kind] of Object.entries(value)) {
    if (path.startsWith('$') || path.split('.').some((part) => part === '' || FORBIDDEN_NAMES.has(part))) {
      throw new TypeError(`Expected \`${name}\` to name fields by dot paths, got the key ${describe(path)}`);
    }
    if (kind !== 1 && kind !== -1 && kind !== 'hashed') throw new TypeError(`Expected \`${name}.${path}\` to be 1, -1 or 'hashed', got ${describe(kind)}`);
  }
  return value as Readonly<Record<string, 1 | -1 | 'hashed'>>;
}

/** Throws unless `value` is a usable write concern (never 0). */
export function expectW(name: string, value: unknown): WriteConcernW {
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 1 || value > 50) {
      throw new RangeError(`Expected \`${name}\` to be 'majority' or an integer from 1 to 50 (0 cannot confirm a lock), got ${describe(value)}`);
    }
    return value;
  }
  if (value !== 'majority') {
    throw new TypeError(`Expected \`${name}\` to be 'majority' or a number of members, got ${describe(value)}`);
  }
  return value;
}

/** Throws unless `value` has the boom helpers monglock calls. */
export function expectBoom(name: string, value: unknown): BoomLike | undefined {
  if (value === undefined || value === null || value === false) return undefined;
  const candidate = value as Partial<Record<keyof BoomLike, unknown>>;
  if (
    typeof value !== 'object' && typeof value !== 'function' ||
    typeof candidate.notFound !== 'function' ||
    typeof candidate.conflict !== 'function' ||
    typeof candidate.badImplementation !== 'function'
  ) {
    throw new TypeError(`Expected \`${name}\` to be a boom module (with notFound, conflict and badImplementation), got ${describe(value)}`);
  }
  return value as BoomLike;
}

/** Throws unless `value` looks like a driver Collection. */
export function expectCollection(name: string, value: unknown): Collection<Document> {
  const candidate = value as Partial<Record<string, unknown>> | null;
  if (
    typeof candidate !== 'object' || candidate === null ||
    typeof candidate.findOneAndUpdate !== 'function' ||
    typeof candidate.updateOne !== 'function' ||
    typeof candidate.aggregate !== 'function'
  ) {
    throw new TypeError(`Expected \`${name}\` to be a MongoDB driver Collection, got ${describe(value)}`);
  }
  return value as Collection<Document>;
}

/** Throws unless `value` is true or false. */
export function expectBoolean(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`Expected \`${name}\` to be true or false, got ${describe(value)}`);
  return value;
}

/** Throws unless `value` is a function (or undefined, when optional). */
export function expectFunction<T>(name: string, value: unknown): T {
  if (typeof value !== 'function') throw new TypeError(`Expected \`${name}\` to be a function, got ${describe(value)}`);
  return value as T;
}

