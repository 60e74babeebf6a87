import type { Document } from 'mongodb';
import { isLockError, lockError } from './errors';
import { AssertivePending, LockEngine, type Proof } from './lock-engine';
import { LockHandle, readLockData, type HandleOwner, type LockData } from './lock-handle';
import {
  expectFunction,
  expectMs,
  expectObject,
  resolveCallOptions,
  resolveLockOptions,
  type PromiseLibrary,
  type ResolvedCallOptions,
} from './options';
import type { TagRule } from './relationships';
import { inPromiseLibrary } from './promise-library';
import { holdWhile, type UsingBody } from './scoped-hold';
import { ServerClock } from './server-clock';
import { Store } from './store';
import { LockPaths } from './stored-format';
import { abortable, readWaitParams, retryWithin } from './waiting';

/** While waiting, every how many refused attempts one is explained by a read (missing document, clock). */
const EXPLAIN_EVERY = 8;

/** How the two factories differ. */
export interface DocumentLockKind {
  readonly rules: ReadonlyMap<string, TagRule>;
  readonly conflict: 'LockAlreadyTaken' | 'CooperativeLock';
  readonly reportsReacquired: boolean;
}

/**
 * Locks embedded in the caller's documents: validation of every argument before any write,
 * waiting, `using()`, handles, the boom bridge and the optional promise library around one
 * {@link LockEngine}.
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

  /** Runs `body` and returns its promise in the caller's promise library. */
  run<T>(body: () => Promise<T>): Promise<T> {
    return inPromiseLibrary(this.PromiseLib, body);
  }

  /** Validated call options of `params` (an object or undefined). */
  callOptions(params: unknown): { params: Record<string, unknown>; call: ResolvedCallOptions } {
    const object = params === undefined ? {} : expectObject('params', params);
    return { params: object, call: resolveCallOptions(object, this.defaults) };
  }

  /**
   * Takes a new lock of `tag`, or with `lock` continues an assertive one. Without `params.wait`
   * it fails fast; with it, conflicts (assertive continuations included) are retried with
   * backoff until the lock is won, `wait` ms pass or `params.signal` aborts.
   */
  async acquire(filter: unknown, tag: string | undefined, params: unknown, lock?: unknown): Promise<LockHandle> {
    const userFilter = expectFilter(filter);
    const { params: p, call } = this.callOptions(params);
    const resumed = lock === undefined ? undefined : this.lockData('params.lock', lock);
    const ruleTag = resumed?.tag ?? tag ?? '';
    const lease = this.leaseOf(ruleTag, p);
    const waiting = readWaitParams(p);
    if (waiting.signal?.aborted) throw waiting.signal.reason;

    // An assertive lock registered by this call: continued on retries, released if we give up.
    let registered: LockData | undefined;
    let attempts = 0;
    const step = async (): Promise<LockData> => {
      const continuing = registered ?? resumed;
      // While waiting, a refusal is explained (a second command) on the first try and every 8th.
      const explain = attempts++ % EXPLAIN_EVERY === 0;
      let outcome: LockData | AssertivePending;
      try {
        outcome = continuing
          ? await this.engine.resume(userFilter, continuing, call)
          : await this.engine.acquire(userFilter, ruleTag, lease, call, { explain });
      } catch (error) {
        if (registered && isLockError(error, 'LockNotFound')) registered = undefined;
        if (isLockError(error, 'DbError') && error.lock && !(error.lock instanceof LockHandle)) {
          // The write may have been applied: give the caller a handle that can release it.
          (error as { lock: unknown }).lock = new LockHandle(error.lock as LockData, this, userFilter);
        }
        throw error;
      }
      if (outcome instanceof AssertivePending) {
        if (!continuing) registered = outcome.lock;
        const carried = new LockHandle(outcome.lock, this, userFilter);
        throw lockError('AssertiveLock', call.boom, { lock: carried, detail: `registered; waiting for tag ${outcome.blockedBy.join(', ')}` });
      }
      if (waiting.signal?.aborted && outcome.id !== resumed?.id) {
        await this.releaseQuietly(userFilter, outcome, call);
        throw waiting.signal.reason;
      }
      return outcome;
    };
    const retryable = (error: unknown): boolean =>
      isLockError(error, this.engine.conflict) ||
      isLockError(error, 'AssertiveLock') ||
      (isLockError(error, 'LockNotFound') && resumed === undefined);
    try {
      const data = await retryWithin(waiting, () => abortable(step(), waiting.signal), retryable);
      return new LockHandle(data, this, userFilter);
    } catch (error) {
      if (!registered || (waiting.wait === 0 && !waiting.signal?.aborted)) throw error;
      await this.releaseQuietly(userFilter, registered, call);
      if (!isLockError(error, 'AssertiveLock')) throw error;
      throw lockError('AssertiveLock', call.boom, { detail: `still asserting after waiting ${waiting.wait} ms; the registered lock was released` });
    }
  }

  /**
   * Acquires (honouring `params.wait`/`params.signal`), runs `body` while extending the lease
   * before it can expire, aborts the body's signal when an extension fails or the lease is lost,
   * and always releases. Resolves the body's result; a body error is never masked by a release
   * failure. After it settles no timer is left.
   */
  async using<T>(filter: unknown, tag: string | undefined, params: unknown, body: unknown): Promise<T> {
    const work = expectFunction<UsingBody<T>>('body', body);
    const handle = await this.acquire(filter, tag, params);
    const { params: p, call } = this.callOptions(params);
    return holdWhile(
      handle,
      {
        leaseMs: this.leaseOf(handle.tag, p),
        now: () => this.engine.now(),
        callParams: { timeout: call.timeout, w: call.w, boom: call.boom },
        outerSignal: readWaitParams(p).signal,
        boom: call.boom,
      },
      work,
    );
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
    const extended = await this.engine.extend(userFilter, lock, proof, this.leaseOf(lock.tag, p), call);
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

  /** `params.locktimeout`, validated, else the tag's lease. */
  private leaseOf(tag: string, params: Record<string, unknown>): number {
    return params.locktimeout === undefined ? this.engine.rule(tag).lease : expectMs('params.locktimeout', params.locktimeout);
  }

  private async releaseQuietly(filter: Document, lock: LockData, call: ResolvedCallOptions): Promise<void> {
    await this.engine.release(filter, lock.tag, { id: lock.id }, lock, call).catch(() => undefined);
  }
}

/** Throws unless `filter` is a filter object. */
export function expectFilter(filter: unknown): Document {
  return expectObject('filter', filter);
}
