import type { Document } from 'mongodb';
import { acquireOnDocument, type AcquireSite } from './document-acquire';
import { convertTraced, type ConversionAftermath } from './conversion';
import { isTraced, traced } from '../common/diagnostics';
import type { ConflictSubtype } from '../common/errors';
import { finalCallOf, inTransaction } from '../common/write-params';
import { TransactionWrites } from './transaction-writes';
import { extendLock, keepLock } from './extension';
import type { KnownKeys } from '../common/known-keys';
import type { Acquired } from '../engine/acquired';
import { LockEngine } from '../engine/lock-engine';
import type { Proof } from '../protocol/proofs';
import { extensionOf, HANDLE_PARAMS, Handle, releaseUnclaimed, type Extension, type HandleOwner, type KeptExtension, type LockData } from './lock-handle';
import { readLockData } from './lock-passed-back';
import { readParams, resolveCallOptions, resolveLockOptions, type PromiseLibrary, type ResolvedCallOptions } from '../common/options';
import { expectFilter, expectFunction, isPlainObject, expectMaxHold, expectMs, expectObject } from '../common/validation';
import type { TagRule } from '../protocol/lock-data';
import { inPromiseLibrary, uncancellableWaitWarning, type Cancellation, type Unclaimed } from '../common/promise-library';
import { holdWhile, type UsingBody } from './scoped-hold';
import { releaseHandingOver } from './hand-over';
import { DEFAULT_MAX_HOLD } from './lease-keeper';
import { expectLeaseCoversMinHold } from '../common/min-hold-params';
import { withStoredHold } from '../engine/stored-hold';
import { ServerClock } from '../protocol/server-clock';
import { Store } from '../engine/store';
import { DeploymentProbe } from '../engine/deployment';
import { LockPaths } from '../protocol/stored-format';
import { changeFeedOf } from '../waiting/change-feed';
import { LocalWaiters } from '../waiting/local-waiters';
import { readWaitParams } from '../waiting/wait-options';
import { quarantineHold } from './quarantine';

/** How the two factories differ. */
export interface DocumentLockKind {
  readonly name: 'writeLock' | 'multiLock' | 'semaphore' | 'election';
  /** The keys its options may have. */
  readonly options: KnownKeys;
  readonly rules: ReadonlyMap<string, TagRule>;
  readonly conflict: ConflictSubtype;
  readonly reportsReacquired: boolean;
}

/**
 * Locks embedded in the caller's documents: validation of every argument before any write,
 * waiting, `using()`, handles, the boom bridge and the optional promise library around one
 * {@link LockEngine}.
 */
export class DocumentLock implements HandleOwner, AcquireSite {
  readonly engine: LockEngine;
  private readonly defaults: ResolvedCallOptions;
  private readonly PromiseLib: PromiseLibrary | undefined;
  readonly warnUncancellable = uncancellableWaitWarning();
  readonly clock: ServerClock;
  readonly waiters: LocalWaiters;
  readonly fair: boolean;
  readonly kindName: string;
  /** What the caller's transactions wrote of the locks `using()` keeps. */
  readonly transactionWrites = new TransactionWrites();

  constructor(options: unknown, kind: DocumentLockKind) {
    const resolved = resolveLockOptions(options, kind.options);
    this.kindName = kind.name;
    this.defaults = resolved.call;
    this.fair = resolved.fair;
    this.PromiseLib = resolved.Promise;
    this.clock = new ServerClock(resolved.clock);
    this.waiters = new LocalWaiters(() => this.clock.lower(), resolved.changeStreams ? changeFeedOf(resolved.collection, resolved.field) : undefined);
    this.engine = new LockEngine({
      store: new Store(resolved.collection, resolved.field, resolved.clock),
      paths: new LockPaths(resolved.field),
      rules: kind.rules,
      clock: this.clock,
      conflict: kind.conflict,
      reportsReacquired: kind.reportsReacquired,
      deployment: new DeploymentProbe(resolved.collection, resolved.deployment),
    });
  }

  /** The locked collection, `db.collection`. */
  get namespace(): string {
    return this.engine.namespace;
  }

  /** Runs `body` and returns its promise in the caller's promise library (which may cancel it); an outcome that arrives after its caller cancelled goes to `unclaimed`. */
  run<T>(body: (cancellation: Cancellation) => Promise<T>, unclaimed?: (outcome: Unclaimed) => void): Promise<T> {
    return inPromiseLibrary(this.PromiseLib, body, unclaimed);
  }

  /** Runs an acquisition like {@link run}; a lock it won (or registered) after its caller cancelled is released. */
  runAcquisition(body: (cancellation: Cancellation) => Promise<Handle>): Promise<Handle> {
    return inPromiseLibrary(this.PromiseLib, body, releaseUnclaimed);
  }

  /** Validated call options of `params` (an object or undefined). */
  callOptions(params: unknown): { params: Record<string, unknown>; call: ResolvedCallOptions } {
    const object = params === undefined ? {} : expectObject('params', params);
    return { params: object, call: resolveCallOptions(object, this.defaults) };
  }

  /**
   * Takes a new lock of `tag`, or with `lock` continues an assertive one. Without `params.wait`
   * it fails fast; with it, conflicts (assertive continuations included) are retried with
   * backoff until the lock is won, `wait` ms pass, or `params.signal` or the promise's
   * cancellation aborts. When it gives up, every lock it wrote is released (an assertive
   * registration too), also one written by an attempt that was in flight at that moment.
   */
  acquire(filter: unknown, tag: string | undefined, params: unknown, lock?: unknown, cancellation?: Cancellation): Promise<Handle> {
    if (!isTraced('acquire')) return acquireOnDocument(this, filter, tag, params, lock, cancellation, undefined);
    return traced(
      'acquire',
      () => ({ operation: 'acquire', kind: this.kindName, namespace: this.engine.namespace, tag }),
      () => this.clock.local(),
      (context) => acquireOnDocument(this, filter, tag, params, lock, cancellation, context),
    );
  }

  /**
   * Acquires (honouring `params.wait`/`params.signal`; with `lock`, continues that assertive
   * registration), runs `body` while extending the lease
   * before it can expire, aborts the body's signal when an extension fails or the lease may have
   * ended, and always releases. Resolves the body's result; a body error is never masked by a
   * release failure. After it settles no timer is left.
   */
  async using<T>(filter: unknown, tag: string | undefined, params: unknown, body: unknown, cancellation?: Cancellation, lock?: LockData): Promise<T> {
    const work = expectFunction<UsingBody<T, Handle, Document>>('body', body);
    const maxHoldMs = expectMaxHold('params.maxHold', params === undefined ? undefined : expectObject('params', params).maxHold, DEFAULT_MAX_HOLD);
    const handle = await this.acquire(filter, tag, params, lock, cancellation);
    const { params: p, call } = this.callOptions(params);
    return this.transactionWrites.keeping(handle, (ending) =>
      holdWhile(
        handle,
        {
          leaseMs: this.leaseOf(handle.tag, p),
          callParams: { timeout: call.timeout, w: call.w, releaseW: call.releaseW, boom: call.boom },
          outerSignals: [readWaitParams(p).signal, cancellation?.signal],
          boom: call.boom,
          maxHoldMs,
          ending,
        },
        work,
      ),
    );
  }

  /**
   * Releases the lock identified by `proof` (or, without one, force-releases `tag`) in the
   * document `target` addresses; with `params.update` (or `mark`, a quarantine's), applies it in the same write, only if it is held.
   */
  releaseWith(target: unknown, tag: string, proof: Proof | undefined, claimed: LockData | undefined, params: unknown, group?: string, mark?: Document): Promise<void> {
    if (!isTraced('release')) return this.releaseNow(target, tag, proof, claimed, params, group, mark);
    return traced(
      'release',
      () => ({ operation: 'release', kind: this.kindName, namespace: this.engine.namespace, tag, lockId: claimed?.id || undefined, fence: claimed?.fence || undefined }),
      () => this.clock.local(),
      () => this.releaseNow(target, tag, proof, claimed, params, group, mark),
    );
  }

  private async releaseNow(target: unknown, tag: string, proof: Proof | undefined, claimed: LockData | undefined, params: unknown, group?: string, mark?: Document): Promise<void> {
    const filter = expectFilter('filter', target);
    const { params: p, call: plain } = this.callOptions(params);
    const { write, session, call } = finalCallOf(p, this.engine.field, plain);
    if (write && !proof) throw new TypeError('Expected `params.lock` (or `params.timestamp`) with `params.update`: a forced release applies no update');
    if (session && !proof) throw new TypeError('Expected `params.lock` (or `params.timestamp`) with `params.session`: a forced release joins no transaction');
    // A lock passed back without minHoldUntil (`holdUnknown`): its release, or its hand-over, removes its entry only if it has no hold; else the release keeps it (lib/engine/release.ts).
    const known = claimed;
    const inside = proof && inTransaction(call) ? proof : undefined;
    if (inside) this.transactionWrites.wrote(inside, call);
    const release = (): Promise<void> => this.engine.release(filter, tag, proof, known, call, { ...write, group, ...(mark && { mark }) });
    const released = (): void => wakeAfterRelease(this.waiters, filter, tag, proof && 'id' in proof ? proof.id : undefined, known?.permits);
    // A release in a transaction is not handed over: the waiter's lock would be the transaction's until it commits.
    await releaseHandingOver(this.engine, this.waiters, filter, write || mark || inTransaction(call) || !proof || !('id' in proof) ? undefined : known, call, release, released);
    if (inside) this.transactionWrites.released(inside, () => this.engine.release(filter, tag, inside, known, plain), plain.timeout);
  }

  /**
   * Pushes a lease forward from the server's now: `params.locktimeout` ms, default the tag's
   * lease. Resolves a handle on the lock's document; a handle passed in `params` learns the new
   * expiry too (a `using()` keeping it replans).
   */
  async extendWith(target: unknown, lock: LockData, proof: Proof, params: unknown): Promise<Handle> {
    const filter = expectFilter('filter', target);
    const { params: p, call } = this.callOptions(params);
    const lease = this.leaseOf(lock.tag, p);
    // A lock passed back without minHoldUntil: its stored entry says how short a lease may be.
    const known = 'id' in proof ? await withStoredHold(this.engine.store, this.engine.paths, filter, lock, call) : lock;
    const extended = await extendLock(this, filter, known, proof, expectLeaseCoversMinHold(lease, known, (stamp, end) => this.clock.leaseOf(stamp, end)), p, call);
    for (const given of [p.lock, p.timestamp]) {
      if (given instanceof Handle && given.id === lock.id) Handle.updateExpiry(given, extensionOf(extended));
    }
    return new Handle(extended.lock, this, extended.target);
  }

  release(target: Document, lock: LockData, params: unknown, group?: string): Promise<void> {
    return this.run(() => this.releaseWith(target, lock.tag, { id: lock.id }, lock, readParams('params', params, HANDLE_PARAMS), group));
  }

  /** Ends the hold of `lock` with a quarantine mark (lib/locks/quarantine.ts). */
  readonly quarantine = (target: Document, lock: LockData, params: unknown): Promise<void> => quarantineHold(this, target, lock, params);

  extend(target: Document, lock: LockData, params: unknown, locktimeout: unknown): Promise<Extension> {
    return this.keep(target, lock, params, locktimeout) as Promise<Extension>;
  }

  /** Extends `lock` to `lease` ms (default: its tag's lease); a lease keeper's (`kept`) in a batch where it can be ({@link keepLock}). */
  keep(target: Document, lock: LockData, params: unknown, lease: unknown, kept?: KeptExtension): Promise<Extension | undefined> {
    return this.run(async () => {
      const { params: p, call } = this.callOptions(readParams('params', params, HANDLE_PARAMS));
      const ms = lease === undefined ? this.engine.rule(lock.tag).lease : expectMs('locktimeout', lease);
      return keepLock(this, target, lock, expectLeaseCoversMinHold(ms, lock, (stamp, end) => this.clock.leaseOf(stamp, end)), p, call, kept);
    });
  }

  /** Converts `lock` (a multiLock's) to `tag` (see lib/locks/conversion.ts); the lock it resolves has its new tag, token and lease. */
  convert(target: Document, lock: LockData, tag: unknown, params: unknown, aftermath: (after: ConversionAftermath) => void): Promise<Acquired> {
    return this.run(() => convertTraced(this, this.kindName, target, lock, tag, params, aftermath));
  }

  guard(target: Document, lock: LockData, extra?: Document): Document {
    if (extra !== undefined) expectObject('extra', extra);
    return this.engine.guard(target, lock, extra);
  }

  remaining(lock: LockData): number {
    return this.clock.remaining(lock.expiresAt);
  }

  lease(lock: LockData): number {
    return this.clock.leaseOf(lock.timestamp, lock.expiresAt);
  }

  /** Reads a lock passed back by the caller. */
  lockData(name: string, value: unknown): LockData {
    return readLockData(name, value, this.engine.tags);
  }

  /** `params.locktimeout`, validated, else the tag's lease. */
  leaseOf(tag: string, params: Record<string, unknown>): number {
    return params.locktimeout === undefined ? this.engine.rule(tag).lease : expectMs('params.locktimeout', params.locktimeout);
  }

  /** Releases a lock an abandoned acquisition wrote. */
  async releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void> {
    await this.engine.releaseWritten(written, call);
  }
}

/** A lock of `tag` on the document `target` names was let go here: hands it to the first local waiter it blocked (as many as its permits, for a limited tag). */
function wakeAfterRelease(waiters: LocalWaiters, target: Document, tag: string, lockId: string | undefined, permits = 1): void {
  const id: unknown = target._id;
  if (id !== undefined && !(isPlainObject(id) && Object.keys(id).some((key) => key.startsWith('$')))) waiters.released(id, tag, lockId, permits);
  else if (lockId !== undefined) waiters.releasedLock(lockId, tag, permits);
}
