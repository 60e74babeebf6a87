import type { Collection, Document, UpdateResult } from 'mongodb';
import { knownKeys } from '../common/known-keys';
import type { LockOperation } from '../protocol/operation';
import { clearV2TagOperation, clearV2WriteLockOperation } from '../protocol/v2-format';
import { readParams, type WriteConcernW } from '../common/options';
import { expectCollection, expectObject, expectSafeName, expectW } from '../common/validation';

/** Options of {@link clearV2Locks}. */
export interface ClearV2LocksOptions {
  /** The lock property's name; monglock v2's was always `lock`. @default 'lock' */
  readonly field?: string;
  /** The v2 multiLock tags whose arrays (`lock.<tag>`) are removed. @default [] (writeLock fields only) */
  readonly tags?: readonly string[];
  /** Which documents to clear. @default {} (all) */
  readonly filter?: Document;
  /** Write concern of the clearing updates. @default 'majority' */
  readonly w?: WriteConcernW;
}

const OPTIONS = knownKeys<ClearV2LocksOptions>()(['field', 'tags', 'filter', 'w']);

/** What {@link clearV2Locks} changed. */
export interface ClearedV2Locks {
  /** Documents whose v2 writeLock fields (`lock.active`, `lock.timestamp`) were removed. */
  readonly writeLocks: number;
  /** Per tag, documents whose v2 array `lock.<tag>` was removed. */
  readonly tags: Readonly<Record<string, number>>;
}

/**
 * Removes the lock fields monglock v2 stored (`lock.active`, `lock.timestamp`, and the
 * `lock.<tag>` arrays of the given tags) from the documents matching `filter`, leaving
 * monglock 3's fields and your data alone. Run it once, after every v2 client has stopped (see
 * docs/upgrading-from-v2.md): v2 and 3 do not see each other's locks.
 * @throws {TypeError} on invalid arguments, before anything is written.
 * @example
 * await clearV2Locks(db.collection('orders'), { tags: ['read', 'write'] });
 */
export async function clearV2Locks<TSchema extends Document = Document>(collection: Collection<TSchema>, options: ClearV2LocksOptions = {}): Promise<ClearedV2Locks> {
  const target = expectCollection('collection', collection);
  const o = readParams('options', options, OPTIONS);
  const field = o.field === undefined ? 'lock' : expectSafeName('options.field', o.field);
  const filter = o.filter === undefined ? {} : expectObject('options.filter', o.filter);
  const writeConcern = { w: o.w === undefined ? 'majority' : expectW('options.w', o.w) };
  if (o.tags !== undefined && !Array.isArray(o.tags)) throw new TypeError('Expected `options.tags` to be an array of v2 tag names');
  const tags = ((o.tags ?? []) as unknown[]).map((tag, index) => expectSafeName(`options.tags[${index}]`, tag));

  const cleared: Record<string, number> = {};
  const clear = ({ filter: where, update }: LockOperation): Promise<UpdateResult> => target.updateMany(where, update, { writeConcern });
  const writeLocks = await clear(clearV2WriteLockOperation(field, filter));
  for (const tag of tags) cleared[tag] = (await clear(clearV2TagOperation(field, filter, tag))).modifiedCount;
  return { writeLocks: writeLocks.modifiedCount, tags: cleared };
}
