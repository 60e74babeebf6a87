import type { Document } from 'mongodb';

/**
 * What a `using()` body (or a hapi handler on a locked route) returns to end its critical section
 * with a write: `update` is applied in the same atomic update that releases the lock, only while
 * the lock is still held, and the call then resolves `value`. Made by {@link commit}.
 */
export class Commit<T = undefined> {
  /** @internal */
  constructor(
    readonly update: Document,
    readonly value: T,
  ) {}
}

/**
 * Ends a critical section with `update` (update operators on the locked document, never its lock
 * field), applied by the release itself: a read-modify-write under a lock takes two commands
 * (acquire with `document`, then this) instead of four, and the write can never land after the
 * lock was lost. Resolves `value` from `using()` (or answers it from a hapi handler).
 * @example
 * await accounts.using({ _id }, { document: true }, (lock) =>
 *   commit({ $inc: { balance: -amount } }, { balance: lock.document.balance - amount }));
 */
export function commit<T = undefined>(update: Document, value?: T): Commit<T> {
  return new Commit(update, value as T);
}
