import { describe } from './validation';

/** Per-call option of an acquisition (`acquire`, `using`): the minimum hold of run-once jobs and rate limits. */
export interface MinHoldParams {
  /**
   * ms from the acquisition (its stamp, by the server's clock) during which the lock stays taken
   * even once released: a release before then ends this caller's hold but leaves its entry, which
   * refuses every other acquisition (with the 409 a held lock gives) until `timestamp + minHold`.
   * A job that every instance starts at the same moment then runs once (ShedLock's
   * `lockAtLeastFor`); on a semaphore with a limit K it makes a rate limit (at most K acquisitions
   * within any `minHold` ms). From 1 to the lease. The entry left is no hold: `guard()` matches
   * nothing, `extend` or a second release is `LockNotFound`; a forced release removes it.
   * @default none (a release frees the lock at once)
   */
  readonly minHold?: number;
}

/**
 * Throws a TypeError when `lease` (ms from the server's now) could end a lock taken with minHold
 * before its minimum hold does: an extension by at least `minHold` ends at or after `timestamp +
 * minHold`, since the server's now is past the stamp; a shorter one might not. `leaseOf` reads the
 * minHold back from the stored end (which, as a lease's, includes the clocks' skew). Returns `lease`.
 */
export function expectLeaseCoversMinHold(lease: number, lock: { readonly timestamp: number; readonly minHoldUntil?: number | undefined }, leaseOf: (stamp: number, end: number) => number): number {
  if (lock.minHoldUntil === undefined) return lease;
  const minHold = leaseOf(lock.timestamp, lock.minHoldUntil);
  if (lease < minHold) throw new TypeError(`Expected a lease of at least the lock's minHold (${minHold} ms), got ${lease} ms: a lock taken with minHold keeps its entry until its minimum hold ends`);
  return lease;
}

/**
 * `params.minHold` of an acquisition whose lease is `lease` ms: an integer number of ms from 1 to
 * the lease (a minimum hold past the lease would outlast the lock); undefined when not given.
 * Throws a TypeError otherwise, before anything is written.
 */
export function expectMinHold(name: string, value: unknown, lease: number): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > lease) {
    throw new TypeError(`Expected \`${name}\` to be an integer number of ms from 1 to the lease (${lease} ms), got ${describe(value)}`);
  }
  return value;
}
