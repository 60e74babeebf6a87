import type { Document } from 'mongodb';
import { WRITE_OPTIONS, type LockUpdate, type WriteOptions } from '../common/options';
import { expectArrayFilters, sessionOf } from '../common/write-params';
import { expectFilter, expectObject } from '../common/validation';
import { refuseUnknownKeys } from '../common/known-keys';

/**
 * What a `using()` body (or a hapi handler on a locked route) returns to end its critical section
 * with a write: `update` is applied in the same atomic update that releases the lock, only while
 * the lock is still held, and the call then resolves `value`. Made by {@link commit}.
 */
export interface Commit<T = undefined, TSchema extends Document = Document> {
  /** Update operators on the locked document. */
  readonly update: LockUpdate<TSchema>;
  /** What the call resolves once the update is applied. */
  readonly value: T;
  /** How the update applies (`match`, `arrayFilters`), and the caller's transaction it joins (`session`). */
  readonly options: CommitOptions<TSchema>;
}

/** How a commit's update applies, and the transaction it joins: see {@link WriteOptions}. */
export type CommitOptions<TSchema extends Document = Document> = WriteOptions<TSchema>;

/** Marks what `commit()` and `commitAll()` return in every copy of this package (`instanceof` tells only this copy's). */
const COMMIT_BRAND = Symbol.for('monglock.commit');

/** The class behind {@link Commit}. */
export class CommitRequest<T, TSchema extends Document> implements Commit<T, TSchema> {
  constructor(
    readonly update: LockUpdate<TSchema>,
    readonly value: T,
    readonly options: CommitOptions<TSchema> = {},
  ) {}

  get [COMMIT_BRAND](): true {
    return true;
  }
}

/** `value instanceof Commit` is true for what {@link commit} returns. */
export const Commit: {
  readonly prototype: Commit<unknown, Document>;
  [Symbol.hasInstance](value: unknown): value is Commit<unknown, Document>;
} = CommitRequest as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])

/**
 * The class behind what `commitAll()` (lib/groups/commit-all.ts) returns: one update per document
 * of a group. It lives here so that `using()`, which locks one document, can refuse it.
 */
export class CommitAllRequest<T> {
  constructor(
    readonly updates: ReadonlyArray<Document | null | undefined>,
    readonly value: T,
  ) {}

  get [COMMIT_BRAND](): true {
    return true;
  }
}

/**
 * True for a `commit()` or `commitAll()` of another copy of this package (two versions in
 * node_modules): this copy cannot apply it, and returned as a value it would write nothing.
 */
export function isForeignCommit(result: unknown): boolean {
  if (typeof result !== 'object' || result === null || result instanceof CommitRequest || result instanceof CommitAllRequest) return false;
  return (result as { [COMMIT_BRAND]?: unknown })[COMMIT_BRAND] === true;
}

/** Why a commit of another copy of this package is refused. */
export const FOREIGN_COMMIT = 'a commit() or commitAll() made by another copy of monglock (two copies are installed: `npm ls monglock`, then deduplicate them) cannot be applied by this one';

/**
 * Ends a critical section with `update` (update operators on the locked document, never its lock
 * field, typed by the collection's schema), applied by the release itself: a read-modify-write
 * under a lock takes two commands (acquire with `document`, then this) instead of four, and the
 * write can never land after the lock was lost. Resolves `value` from `using()` (or answers it
 * from a hapi handler). The schema is taken from where the commit is returned (a `using()` body
 * of a typed collection checks the update against it), never from the update itself.
 * `options` say how the update applies (`match`: what the document must also match, such as the
 * array element of a positional `$`; `arrayFilters`) and which transaction it joins (`session`:
 * docs/api.md, "Transactions"); they are checked before anything is written.
 * @throws {TypeError} on options it does not know, or of the wrong type
 * @example
 * await accounts.using({ _id }, { document: true }, (lock) =>
 *   commit({ $inc: { balance: -amount } }, lock.document.balance - amount));
 */
export function commit<T = undefined, TSchema extends Document = Document>(update: LockUpdate<NoInfer<TSchema>>, value?: T, options?: CommitOptions<NoInfer<TSchema>>): Commit<T, TSchema> {
  return new CommitRequest(update, value as T, options === undefined ? {} : commitOptionsOf(options));
}

/** MongoDB's update operators: a plain object whose keys are all among them is an update document. */
const UPDATE_OPERATORS: ReadonlySet<string> = new Set(['$set', '$unset', '$inc', '$mul', '$min', '$max', '$rename', '$currentDate', '$setOnInsert', '$push', '$pull', '$pullAll', '$addToSet', '$pop', '$bit']);

/**
 * A body's result that is an update document (a plain object whose keys are all update operators,
 * `{ $set: … }`), or an array of them: `commit()` or `commitAll()` forgotten around it. Returned
 * as is, it would be the call's value and nothing would be written; it is refused instead. (A
 * filter such as `{ $or: … }` or a pipeline `[{ $match: … }]` is a value like any other.)
 */
export function isBareUpdate(result: unknown): boolean {
  if (Array.isArray(result)) return result.length > 0 && result.every((each) => isBareUpdate(each));
  if (typeof result !== 'object' || result === null) return false;
  const prototype = Object.getPrototypeOf(result) as unknown;
  if (prototype !== Object.prototype && prototype !== null) return false;
  const keys = Object.keys(result);
  return keys.length > 0 && keys.every((key) => UPDATE_OPERATORS.has(key));
}

/** `options` of {@link commit}, validated. */
function commitOptionsOf<TSchema extends Document>(options: CommitOptions<TSchema>): CommitOptions<TSchema> {
  const given = expectObject('options', options);
  refuseUnknownKeys('options', given, WRITE_OPTIONS);
  if (given.match !== undefined) expectFilter('options.match', given.match);
  if (given.arrayFilters !== undefined) expectArrayFilters('options.arrayFilters', given.arrayFilters);
  sessionOf(given, 'options');
  return options;
}
