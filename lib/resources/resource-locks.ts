import type { Document } from 'mongodb';
import type { LockOptions, CallOptions, HoldParams, PromiseLibrary } from '../common/options';
import type { PromiseOf } from '../common/promise-types';
import { ResourceLockClient } from './client';
import type { ResourceLockHandle } from './handle';
import type { LockDetails, StatusFilter } from './params';
import type { LockStatus } from './status';
import type { UsingBody } from '../locks/scoped-hold';
import type { WaitOptions } from '../waiting/wait-options';
import type { MinHoldParams } from '../common/min-hold-params';

export { ResourceLockHandle, type ResourceLockType } from './handle';
export type { LockDetails, StatusFilter } from './params';
export type { LockStatus } from './status';

/** Options of {@link resourceLocks}. */
export interface ResourceLocksOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined> extends Omit<LockOptions<TSchema, P>, 'field' | 'fair' | 'changeStreams' | 'shardKey'> {
  /**
   * How long after its last lease ends an abandoned resource document may be deleted by the TTL
   * index (garbage collection only; expiry never waits for it), in ms.
   * @default 3600000 (one hour)
   */
  readonly gcAfter?: number;
}

/** Per-call options of `xlock`/`slock`/`using`. */
export interface ResourceLockParams extends LockDetails, CallOptions, Omit<WaitOptions, 'fair'>, MinHoldParams {}

/** Per-call options of `using`: those of `xlock`/`slock`, the ceiling on renewal, and which kind of lock. */
export interface ResourceUsingParams extends ResourceLockParams, HoldParams {
  /** Take a shared lock instead of an exclusive one. @default false */
  readonly shared?: boolean;
  /** With `shared`: at most this many shared holders (negative: unlimited). @default -1 */
  readonly maxConcurrent?: number;
}

/** A client over a lock collection: named resources, exclusive and shared locks, lock groups; `P` is the `Promise` option. */
export interface ResourceLocks<P = undefined> {
  /** Creates lookup indexes by lock id, owner and expiry, the index on `lock.until` that `status` reads by, and the TTL index on `gcAt` (resources are keyed by `_id`, unique without it). */
  createIndexes(): PromiseOf<P, string[]>;
  /** Exclusive lock on `resource` for the group `lockId`; creates the resource document on first use (again, within `wait`, if purged meanwhile). */
  xlock(resource: string, lockId: string, params?: ResourceLockParams): PromiseOf<P, ResourceLockHandle<P>>;
  /** Shared lock: at most `maxConcurrent` shared holders (negative: unlimited), one per lock id. */
  slock(resource: string, lockId: string, params?: ResourceLockParams, maxConcurrent?: number): PromiseOf<P, ResourceLockHandle<P>>;
  /** Releases every lock of the group `lockId`, on every resource; resolves the live locks it released, newest first (an expired one it removes had ended already: not reported). */
  unlock(lockId: string): PromiseOf<P, LockStatus[]>;
  /**
   * Renews every lock of the group to `ttl` ms from the server's now; rejects `LockNotFound` naming
   * any missing or expired one, and `DbError` when a renewal failed without the lock being gone
   * (`err.data.unknown`: a lost reply, the renewal may have landed, as with a handle's `extend()`).
   */
  renew(lockId: string, ttl: number): PromiseOf<P, LockStatus[]>;
  /** The locks held (unexpired by the server's clock), filtered; reads only the resource documents whose `lock.until` has not passed. */
  status(filter?: StatusFilter): PromiseOf<P, LockStatus[]>;
  /** Removes expired locks and deletes resource documents that hold none. */
  purge(): PromiseOf<P, { documentsPruned: number; documentsDeleted: number }>;
  /**
   * Runs `purge` every `intervalMs`, one run at a time (a tick while one runs is skipped); `stop()`
   * starts no further run and waits for the run in flight. An error thrown by `onError` is dropped.
   */
  purgeEvery(intervalMs: number, onError?: (error: unknown) => void): { stop(): Promise<void> };
  /** Scoped lock: acquires (exclusive, or shared with `shared: true`), renews while `body` runs, aborts its signal if lost, releases. */
  using<T>(resource: string, lockId: string, params: ResourceUsingParams, body: UsingBody<T, ResourceLockHandle<P>>): PromiseOf<P, T>;
}

/**
 * Creates a resource-lock client over a dedicated lock collection (one document per resource,
 * keyed by `_id`).
 * @throws {TypeError | RangeError} on invalid options.
 * @example
 * const locks = resourceLocks({ collection: db.collection('locks') });
 * await locks.createIndexes();
 * const lock = await locks.xlock('invoice-run', 'job-42', { owner: 'billing', ttl: 30_000 });
 * await locks.unlock('job-42');
 */
export function resourceLocks<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined>(options: ResourceLocksOptions<TSchema, P>): ResourceLocks<P> {
  // The methods return the `Promise` option's promises (the client runs them in it): typed as such here.
  return new ResourceLockClient(options as unknown as ResourceLocksOptions).api() as unknown as ResourceLocks<P>;
}
