import type { Document } from 'mongodb';
import { lockError } from './errors';
import { AssertivePending, LockEngine, type Proof } from './lock-engine';
import { LockHandle, readLockData, type HandleOwner, type LockData } from './lock-handle';
import {
  expectMs,
  expectObject,
  resolveCallOptions,
  resolveLockOptions,
  type PromiseLibrary,
  type ResolvedCallOptions,
} from './options';
import type { TagRule } from './relationships';
import { ServerClock } from './server-clock';
import { Store } from './store';
import { LockPaths } from './stored-format';

/** How the two factories differ. */
export interface DocumentLockKind {
  readonly rules: ReadonlyMap<string, TagRule>;
  readonly conflict: 'LockAlreadyTaken' | 'CooperativeLock';
  readonly reportsReacquired: boolean;
}

/**
 * Locks embedded in the caller's documents: validation of every argument before any write,
 * handles, the boom bridge and the optional promise library around one {@link LockEngine}.
 */
export class DocumentLock implements HandleOwner {
  readonly engine: LockEngine;
  private readonly defaults: ResolvedCallOptions;
  private readonly PromiseLib: PromiseLibrary | undefined;

  constructor(options: unknown, kind: DocumentLockKind) {
    const resolved = resolveLockOptions(options);
    this.defaults = resolved.call;
    this.PromiseLib = resolved.Promise;
    this.engine = new LockEngine({
      store: new Store(resolved.collection, resolved.field, resolved.clock),
      paths: new LockPaths(resolved.field),
      rules: kind.rules,
      clock: new ServerClock(resolved.clock),
      conflict: kind.conflict,
      reportsReacquired: kind.reportsReacquired,
    });
  }

  /** Runs `body` and returns its promise in the caller's promise library; synchronous throws become rejections. */
  run<T>(body: () => Promise<T>): Promise<T> {
    let promise: Promise<T>;
    try {
      promise = body();
    } catch (error) {
      promise = Promise.reject(error);
    }
    return (this.PromiseLib ? this.PromiseLib.resolve(promise) : promise) as Promise<T>;
  }

  /** Validated call options of `params` (an object or undefined). */
  callOptions(params: unknown): { params: Record<string, unknown>; call: ResolvedCallOptions } {
    const object = params === undefined ? {} : expectObject('params', params);
    return { params: object, call: resolveCallOptions(object, this.defaults) };
  }

  /** Takes a new lock of `tag`; rejects with `AssertiveLock` (carrying the lock) while asserted tags are held. */
  async acquire(filter: unknown, tag: string, params: unknown): Promise<LockHandle> {
    const userFilter = expectFilter(filter);
    const { params: p, call } = this.callOptions(params);
    const lease = p.locktimeout === undefined ? this.engine.rule(tag).lease : expectMs('params.locktimeout', p.locktimeout);
    return this.settle(await this.engine.acquire(userFilter, tag, lease, call), userFilter, call);
  }

  /** Continues an assertive acquisition with the lock that `AssertiveLock` carried. */
  async resume(filter: unknown, lock: unknown, params: unknown): Promise<LockHandle> {
    const userFilter = expectFilter(filter);
    const data = readLockData('params.lock', lock, this.engine.tags);
    const { call } = this.callOptions(params);
    return this.settle(await this.engine.resume(userFilter, data, call), userFilter, call);
  }

  /** Releases the lock identified by `proof` (or, without one, force-releases `tag`). */
  async releaseWith(filter: unknown, tag: string, proof: Proof | undefined, claimed: LockData | undefined, params: unknown): Promise<void> {
    const userFilter = expectFilter(filter);
    const { call } = this.callOptions(params);
    await this.engine.release(userFilter, tag, proof, claimed, call);
  }

  /** Pushes a lease forward from the server's now: `params.locktimeout` ms, default the tag's lease. */
  async extendWith(filter: unknown, lock: LockData, proof: Proof, params: unknown): Promise<LockHandle> {
    const userFilter = expectFilter(filter);
    const { params: p, call } = this.callOptions(params);
    const lease = p.locktimeout === undefined ? this.engine.rule(lock.tag).lease : expectMs('params.locktimeout', p.locktimeout);
    const extended = await this.engine.extend(userFilter, lock, proof, lease, call);
    return new LockHandle(extended, this, userFilter);
  }

  release(filter: Document, lock: LockData, params?: object): Promise<void> {
    return this.run(() => this.releaseWith(filter, lock.tag, { id: lock.id }, lock, params));
  }

  extend(filter: Document, lock: LockData, params?: object): Promise<LockData> {
    return this.run(() => this.extendWith(filter, lock, { id: lock.id }, params));
  }

  guard(filter: Document, lock: LockData, extra?: Document): Document {
    if (extra !== undefined) expectObject('extra', extra);
    return this.engine.guard(filter, lock, extra);
  }

  /** Reads a lock passed back by the caller. */
  lockData(name: string, value: unknown): LockData {
    return readLockData(name, value, this.engine.tags);
  }

  private settle(outcome: LockData | AssertivePending, filter: Document, call: ResolvedCallOptions): LockHandle {
    if (outcome instanceof AssertivePending) {
      const lock = new LockHandle(outcome.lock, this, filter);
      throw lockError('AssertiveLock', call.boom, { lock, detail: `registered; waiting for tag ${outcome.blockedBy.join(', ')}` });
    }
    return new LockHandle(outcome, this, filter);
  }
}

/** Throws unless `filter` is a filter object. */
export function expectFilter(filter: unknown): Document {
  return expectObject('filter', filter);
}
