import { keptId } from '../protocol/min-hold';
import { expectLeaseCoversMinHold } from '../common/min-hold-params';
import type { ReleaseWrite } from '../engine/release';
import type { Document } from 'mongodb';
import { traced } from '../common/diagnostics';
import { withDbErrors } from '../common/errors';
import type { Acquired } from '../engine/acquired';
import { LockEngine } from '../engine/lock-engine';
import { extensionOf, HANDLE_PARAMS, releaseUnclaimed, type Extension, type HandleOwner, type LockData } from '../locks/lock-handle';
import { readParams, resolveCallOptions, resolveLockOptions, UPDATE_KEYS, type PromiseLibrary, type ResolvedCallOptions } from '../common/options';
import { expectMaxHold, expectFunction, expectMs, describe, expectObject } from '../common/validation';
import { MAX_MS } from '../common/validation';
import { resolveTagRules } from '../locks/relationships';
import { inPromiseLibrary, uncancellableWaitWarning, type Cancellation } from '../common/promise-library';
import { ResourceHandle, type ResourceLockType } from './handle';
import type { ResourceLocks, ResourceLocksOptions } from './resource-locks';
import { readLockDetails, RESOURCE_LOCK_PARAMS, RESOURCE_LOCKS_OPTIONS, RESOURCE_USING_PARAMS, type LockDetails } from './params';
import { createIndexes, purge, purgeEvery, renew, unlock } from './groups';
import { status } from './status';
import { lockResource, type ResourceAcquireSite } from './resource-acquire';
import { gcDateOf, renewalExtra, RESOURCE_FIELD } from '../protocol/resource-document';
import { ResourceStore } from './resource-store';
import { KnownResources } from './known-resources';
import { holdWhile, type UsingBody } from '../locks/scoped-hold';
import { DEFAULT_MAX_HOLD } from '../locks/lease-keeper';
import { ServerClock } from '../protocol/server-clock';
import { DeploymentProbe } from '../engine/deployment';
import { LockPaths } from '../protocol/stored-format';
import { readWaitParams } from '../waiting/wait-options';

/**
 * The resource-lock client: each resource is a document `{ _id: name, lock, gcAt }` in the lock
 * collection, locked through the same {@link LockEngine} as document locks, with the tags
 * `exclusive` (cooperative with both) and `shared` (cooperative with `exclusive`).
 */
export class ResourceLockClient implements HandleOwner, ResourceAcquireSite {
  readonly store: ResourceStore;
  readonly engine: LockEngine;
  readonly clock: ServerClock;
  readonly paths = new LockPaths(RESOURCE_FIELD);
  readonly defaults: ResolvedCallOptions;
  private readonly PromiseLib: PromiseLibrary | undefined;
  readonly warnUncancellable = uncancellableWaitWarning();
  readonly gcAfter: number;
  /** Resources this client has seen exist (the last it used): locked directly, without the creating upsert. */
  readonly known = new KnownResources();
  /** Handles kept alive by `using()`, by lock id: `renew` tells them their new expiry. */
  readonly kept = new Map<string, ResourceHandle>();

  constructor(options: ResourceLocksOptions) {
    const resolved = resolveLockOptions(options, RESOURCE_LOCKS_OPTIONS);
    const o = options as unknown as Record<string, unknown>;
    this.gcAfter = o.gcAfter === undefined ? 3_600_000 : expectMs('options.gcAfter', o.gcAfter);
    this.defaults = resolved.call;
    this.PromiseLib = resolved.Promise;
    this.clock = new ServerClock(resolved.clock);
    this.store = new ResourceStore(resolved.collection, RESOURCE_FIELD, resolved.clock);
    this.engine = new LockEngine({
      store: this.store,
      paths: this.paths,
      rules: resolveTagRules({ exclusive: MAX_MS, shared: MAX_MS }, undefined, {
        exclusive: { cooperative: ['exclusive', 'shared'] },
        shared: { cooperative: ['exclusive'] },
      }),
      clock: this.clock,
      conflict: 'LockAlreadyTaken',
      reportsReacquired: false,
      // A resource document is addressed by its name (`_id`): its collection is sharded on `_id`, if at all.
      deployment: new DeploymentProbe(resolved.collection, { ...resolved.deployment, shardKey: { _id: 1 } }),
    });
  }

  /** The lock collection, `db.collection`. */
  get namespace(): string {
    return this.engine.namespace;
  }

  api(): ResourceLocks {
    const run = <T>(body: (cancellation: Cancellation) => Promise<T>): Promise<T> => inPromiseLibrary(this.PromiseLib, body);
    const acquire = (body: (cancellation: Cancellation) => Promise<ResourceHandle>): Promise<ResourceHandle> =>
      inPromiseLibrary(this.PromiseLib, body, releaseUnclaimed);
    return {
      createIndexes: () => run(() => createIndexes(this)),
      xlock: (resource, lockId, params) => acquire((c) => this.lock('exclusive', resource, lockId, params, -1, c)),
      slock: (resource, lockId, params, maxConcurrent = -1) => acquire((c) => this.lock('shared', resource, lockId, params, maxConcurrent, c)),
      unlock: (lockId) => run(() => unlock(this, lockId)),
      renew: (lockId, ttl) => run(() => renew(this, lockId, ttl)),
      status: (filter) => run(() => status(this, filter)),
      purge: () => run(() => purge(this)),
      purgeEvery: (intervalMs, onError) => purgeEvery(this, intervalMs, onError),
      using: (resource, lockId, params, body) => run((c) => this.using(resource, lockId, params, body, c)),
    };
  }

  /**
   * xlock/slock: creates the resource's document on first use (without a lock: the lock is then
   * taken by the engine's checked update, never by an unchecked stamp), then acquires. Waiting
   * and abandonment as for document locks: a lock written after the caller gave up is released.
   */
  private lock(type: ResourceLockType, resource: unknown, lockId: unknown, params: unknown, maxConcurrent: unknown, cancellation?: Cancellation): Promise<ResourceHandle> {
    return traced(
      'acquire',
      () => ({ operation: 'acquire', kind: 'resourceLocks', namespace: this.engine.namespace, tag: type }),
      () => this.clock.local(),
      async (context) => {
        const handle = await lockResource(this, type, resource, lockId, params, maxConcurrent, cancellation);
        if (context) Object.assign(context, { lockId: handle.id, fence: handle.fence, expiresAt: handle.expiresAt });
        return handle;
      },
    );
  }

  /** What renewing a lock of `tag` also writes: its renewal time, and the later GC date. */
  renewal(tag: string): (at: Date, exp: Date) => Document {
    return (at, exp) => renewalExtra(this.paths, tag, at, gcDateOf(exp, this.gcAfter));
  }

  private async using<T>(resource: unknown, lockId: unknown, params: unknown, body: unknown, cancellation?: Cancellation): Promise<T> {
    const work = expectFunction<UsingBody<T, ResourceHandle>>('body', body);
    const p = readParams('params', params, RESOURCE_USING_PARAMS, false);
    const { shared, maxConcurrent, maxHold, ...lockParams } = p;
    const maxHoldMs = expectMaxHold('params.maxHold', maxHold, DEFAULT_MAX_HOLD);
    if (shared !== undefined && typeof shared !== 'boolean') throw new TypeError(`Expected \`params.shared\` to be true or false, got ${describe(shared)}`);
    if (!shared && maxConcurrent !== undefined) throw new TypeError('Expected no `params.maxConcurrent` without `shared: true`: an exclusive lock has one holder');
    const handle = shared
      ? await this.lock('shared', resource, lockId, lockParams, maxConcurrent ?? -1, cancellation)
      : await this.lock('exclusive', resource, lockId, lockParams, -1, cancellation);
    const { call, details } = this.readParams(lockParams);
    this.kept.set(handle.id, handle);
    try {
      return await holdWhile(
        handle,
        {
          leaseMs: details.ttl ?? Infinity,
          callParams: { timeout: call.timeout, w: call.w, releaseW: call.releaseW, boom: call.boom },
          outerSignals: [readWaitParams(p).signal, cancellation?.signal],
          boom: call.boom,
          maxHoldMs,
        },
        work,
      );
    } finally {
      this.kept.delete(handle.id);
    }
  }

  // HandleOwner: what a ResourceLockHandle calls back into.

  release(target: Document, lock: LockData, params: unknown): Promise<void> {
    return inPromiseLibrary(this.PromiseLib, async () => {
      const p = readParams('params', params, HANDLE_PARAMS);
      refuseFinalWrite(p);
      const call = resolveCallOptions(p, this.defaults);
      await traced(
        'release',
        () => ({ operation: 'release', kind: 'resourceLocks', namespace: this.engine.namespace, tag: lock.tag, lockId: lock.id }),
        () => this.clock.local(),
        () => this.engine.release(target, lock.tag, { id: lock.id }, lock, call, keptGroup(lock)),
      );
    });
  }

  extend(target: Document, lock: LockData, params: unknown, locktimeout: unknown): Promise<Extension> {
    return inPromiseLibrary(this.PromiseLib, async () => {
      const p = readParams('params', params, HANDLE_PARAMS);
      refuseFinalWrite(p);
      const call = resolveCallOptions(p, this.defaults);
      const lease = locktimeout === undefined ? Infinity : expectMs('locktimeout', locktimeout);
      expectLeaseCoversMinHold(lease, lock, (stamp, end) => this.clock.leaseOf(stamp, end));
      const extended = await traced(
        'extend',
        () => ({ operation: 'extend', kind: 'resourceLocks', namespace: this.engine.namespace, tag: lock.tag, lockId: lock.id }),
        () => this.clock.local(),
        () => this.engine.extend(target, lock, { id: lock.id }, lease, call, this.renewal(lock.tag)),
      );
      return extensionOf(extended);
    });
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

  readParams(params: unknown): { p: Record<string, unknown>; call: ResolvedCallOptions; details: LockDetails } {
    const p = readParams('params', params, RESOURCE_LOCK_PARAMS);
    return { p, call: resolveCallOptions(p, this.defaults), details: readLockDetails(p) };
  }

  async releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void> {
    await this.engine.releaseWritten(written, call);
  }

  private db<T>(call: ResolvedCallOptions, step: () => Promise<T>): Promise<T> {
    return withDbErrors(call.boom, step);
  }
}

/** Refuses a release's or an extension's final write (and its transaction): a resource document holds no data of the caller's. */
function refuseFinalWrite(params: Record<string, unknown>): void {
  const given = UPDATE_KEYS.find((key) => params[key] !== undefined);
  if (given) throw new TypeError(`Expected no \`params.${given}\`: a resource document holds no data of yours to update, nor joins a transaction`);
}

/** A release that keeps its entry (minHold) renames its group, so that `unlock` and `renew` by the lock id leave it (the handle's JSON carries its `lockId`). */
function keptGroup(lock: LockData): ReleaseWrite {
  const group = (lock as { lockId?: unknown }).lockId;
  return typeof group === 'string' ? { keptFields: { group: keptId(group) } } : {};
}
