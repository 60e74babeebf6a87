import type { Document } from 'mongodb';
import { Acquisition } from '../locks/acquisition';
import { traced } from '../common/diagnostics';
import { isLockError, lockError, withDbErrors } from '../common/errors';
import { fenceOf, LockEngine, lockWrittenBy, NEVER, type AcquireExtras, type Acquired } from '../engine/lock-engine';
import { extensionOf, HANDLE_PARAMS, Handle, releaseUnclaimed, type Extension, type HandleOwner, type LockData } from '../locks/lock-handle';
import {
  expectMaxHold,
  expectFunction,
  expectMs,
  describe,
  expectObject,
  MAX_MS,
  readParams,
  resolveCallOptions,
  resolveLockOptions,
  type PromiseLibrary,
  type ResolvedCallOptions,
} from '../common/options';
import { resolveTagRules } from '../locks/relationships';
import { inPromiseLibrary, uncancellableWaitWarning, type Cancellation } from '../common/promise-library';
import { ResourceHandle, type ResourceLockType } from './handle';
import type { ResourceLocks, ResourceLocksOptions } from './resource-locks';
import { expectLimit, expectLockId, expectResource, readLockDetails, readStatusFilter, RESOURCE_LOCK_PARAMS, RESOURCE_LOCKS_OPTIONS, RESOURCE_USING_PARAMS, type LockDetails } from './params';
import { purgeExpired, repeatPurge, type PurgeOutcome } from './purge';
import { RESOURCE_DOCUMENTS, RESOURCE_TAGS, statusesOf, statusMatches, statusQuery, type LockStatus } from './status';
import { ResourceStore } from './resource-store';
import { holdWhile, type UsingBody } from '../locks/scoped-hold';
import { DEFAULT_MAX_HOLD } from '../locks/lease-keeper';
import { ServerClock } from '../protocol/server-clock';
import { LockPaths, type StoredEntry, type StoredLock } from '../protocol/stored-format';
import { linkSignals, readWaitParams, retryWithin } from '../waiting/wait-options';

const FIELD = 'lock';
/** The `_id` of the document the clock is read from: an object, so never a resource's name. */
const CLOCK_DOCUMENT = { monglock: 'clock' };
/** How many times one attempt re-creates a resource document that was purged under it. */
const CREATE_ROUNDS = 3;

/**
 * The resource-lock client: each resource is a document `{ _id: name, lock, gcAt }` in the lock
 * collection, locked through the same {@link LockEngine} as document locks, with the tags
 * `exclusive` (cooperative with both) and `shared` (cooperative with `exclusive`).
 */
export class ResourceLockClient implements HandleOwner {
  private readonly store: ResourceStore;
  private readonly engine: LockEngine;
  private readonly clock: ServerClock;
  private readonly paths = new LockPaths(FIELD);
  private readonly defaults: ResolvedCallOptions;
  private readonly PromiseLib: PromiseLibrary | undefined;
  private readonly warnUncancellable = uncancellableWaitWarning();
  private readonly gcAfter: number;
  /** Resources this client has seen exist: locked directly, without the creating upsert. */
  private readonly known = new Set<string>();
  /** Handles kept alive by `using()`, by lock id: `renew` tells them their new expiry. */
  private readonly kept = new Map<string, ResourceHandle>();

  constructor(options: ResourceLocksOptions) {
    const resolved = resolveLockOptions(options, RESOURCE_LOCKS_OPTIONS);
    const o = options as unknown as Record<string, unknown>;
    this.gcAfter = o.gcAfter === undefined ? 3_600_000 : expectMs('options.gcAfter', o.gcAfter);
    this.defaults = resolved.call;
    this.PromiseLib = resolved.Promise;
    this.clock = new ServerClock(resolved.clock);
    this.store = new ResourceStore(resolved.collection, FIELD, resolved.clock);
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
      createIndexes: () => run(() => this.createIndexes()),
      xlock: (resource, lockId, params) => acquire((c) => this.lock('exclusive', resource, lockId, params, -1, c)),
      slock: (resource, lockId, params, maxConcurrent = -1) => acquire((c) => this.lock('shared', resource, lockId, params, maxConcurrent, c)),
      unlock: (lockId) => run(() => this.unlock(lockId)),
      renew: (lockId, ttl) => run(() => this.renew(lockId, ttl)),
      status: (filter) => run(() => this.status(filter)),
      purge: () => run(() => this.purge()),
      purgeEvery: (intervalMs, onError) => this.purgeEvery(intervalMs, onError),
      using: (resource, lockId, params, body) => run((c) => this.using(resource, lockId, params, body, c)),
    };
  }

  private async createIndexes(): Promise<string[]> {
    const indexes: Array<{ key: Document; name: string; expireAfterSeconds?: number }> = [];
    for (const tag of RESOURCE_TAGS) {
      for (const field of ['group', 'owner', 'exp']) {
        indexes.push({ key: { [`${this.paths.tag(tag)}.${field}`]: 1 }, name: `${tag}_${field}` });
      }
    }
    indexes.push({ key: { gcAt: 1 }, name: 'gc_ttl', expireAfterSeconds: 0 });
    return this.db(this.defaults, () => this.store.createIndexes(indexes, this.defaults));
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
        const handle = await this.lockNow(type, resource, lockId, params, maxConcurrent, cancellation);
        if (context) Object.assign(context, { lockId: handle.id, fence: handle.fence, expiresAt: handle.expiresAt });
        return handle;
      },
    );
  }

  private async lockNow(
    type: ResourceLockType,
    resource: unknown,
    lockId: unknown,
    params: unknown,
    maxConcurrent: unknown,
    cancellation?: Cancellation,
  ): Promise<ResourceHandle> {
    const name = expectResource('resource', resource);
    const group = expectLockId('lockId', lockId);
    const { p, call, details } = this.readParams(params);
    const limit = expectLimit(maxConcurrent);
    const lease = details.ttl ?? Infinity;
    const waiting = readWaitParams(p);
    const { signal, dispose } = linkSignals(waiting.signal, cancellation?.signal);
    if (signal?.aborted) throw signal.reason;
    const entry = { group, owner: details.owner ?? null, host: details.host ?? null, comment: details.comment ?? null, renewedAt: null };
    const extras: AcquireExtras = {
      entry,
      conditions: (at) => (type === 'shared' ? this.sharedConditions(group, limit, at) : []),
      refusal: (lock, now) => (type === 'shared' ? this.sharedRefusal(lock, group, limit, now) : undefined),
      update: (_at, exp) => ({ $max: { gcAt: this.gcDate(exp) } }),
    };
    const acquisition = new Acquisition((written) => this.releaseWritten(written, call), this.clock, () => this.engine.readClock({ _id: name }, call));
    const attempt = (): Promise<Acquired> => acquisition.attempt(() => this.acquireCreating(name, type, lease, call, extras), (won) => won);
    try {
      const won = await retryWithin(
        { wait: waiting.wait, signal },
        () => acquisition.race(attempt(), signal, (outcome) => outcome),
        (error) => {
          const held = isLockError(error, 'LockAlreadyTaken');
          if (held && waiting.wait > 0 && cancellation?.unsupported) this.warnUncancellable(waiting.wait);
          return held;
        },
        () => this.clock.local(),
      );
      const handle = new ResourceHandle(won.lock, this, name, group, details.ttl);
      if (handle.remaining() > 0) return handle;
      const late = lockError('DbError', call.boom, { detail: `the reply came after the lease (${lease} ms) had ended: the network or the server is slower than this ttl allows` });
      await acquisition.abandon(late, won);
      throw late;
    } catch (error) {
      await acquisition.abandon(error);
      const written = lockWrittenBy(error);
      if (written) (error as { lock: unknown }).lock = new ResourceHandle(written.lock, this, name, group, details.ttl, true);
      throw error;
    } finally {
      dispose();
    }
  }

  /** One acquisition attempt on `name`, creating its document first when this client has not seen it (again after a purge). */
  private async acquireCreating(name: string, type: ResourceLockType, lease: number, call: ResolvedCallOptions, extras: AcquireExtras): Promise<Acquired> {
    for (let round = 1; ; round++) {
      if (!this.known.has(name)) {
        await this.db(call, () => this.store.ensureResource(name, this.paths.born, { gcAt: this.gcDate(new Date(this.clock.lower())) }, call));
        this.known.add(name);
      }
      try {
        return await this.engine.acquire({ _id: name }, type, lease, call, extras);
      } catch (error) {
        if (!isLockError(error, 'RessourceNotFound') || round === CREATE_ROUNDS) throw error;
        this.known.delete(name); // purged meanwhile: create it again
      }
    }
  }

  private sharedConditions(group: string, limit: number, at: Date): Document[] {
    const sharedPath = this.paths.tag('shared');
    const conditions: Document[] = [{ [sharedPath]: { $not: { $elemMatch: { group, exp: { $gt: at } } } } }];
    if (limit >= 0) {
      const live = { $filter: { input: { $ifNull: [`$${sharedPath}`, []] }, as: 'entry', cond: { $gt: ['$$entry.exp', at] } } };
      conditions.push({ $expr: { $lt: [{ $size: live }, limit] } });
    }
    return conditions;
  }

  private sharedRefusal(lock: StoredLock, group: string, limit: number, now: number): string | undefined {
    const live = (lock.tags?.shared ?? []).filter((entry) => entry.exp.getTime() > now);
    if (live.some((entry) => (entry as StoredEntry & Document).group === group)) return `lock id ${group} already holds a shared lock here`;
    if (limit >= 0 && live.length >= limit) return `${live.length} shared holders, the most allowed (maxConcurrent ${limit})`;
    return undefined;
  }

  /** What renewing a lock of `tag` also writes: its renewal time, and the later GC date. */
  private renewal(tag: string): (at: Date, exp: Date) => Document {
    return (at, exp) => ({ $set: { [`${this.paths.tag(tag)}.$[mine].renewedAt`]: at }, $max: { gcAt: this.gcDate(exp) } });
  }

  private gcDate(exp: Date): Date {
    return new Date(Math.min(NEVER, exp.getTime() + this.gcAfter));
  }

  private async unlock(lockId: unknown): Promise<LockStatus[]> {
    const group = expectLockId('lockId', lockId);
    const call = this.defaults;
    const { docs, serverNow } = await this.db(call, () => this.store.readAll(this.groupFilter(group), call));
    const now = serverNow?.getTime() ?? this.clock.lower();
    const released = await Promise.all(
      docs.map(async (doc) => {
        const pull = Object.fromEntries(RESOURCE_TAGS.map((tag) => [this.paths.tag(tag), { group }]));
        const before = await this.db(call, () => this.store.updateReturningBefore({ _id: doc._id }, { $pull: pull }, call));
        return statusesOf(this.paths, before, now).filter((status) => status.lockId === group);
      }),
    );
    return released.flat().sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime());
  }

  private async renew(lockId: unknown, ttl: unknown): Promise<LockStatus[]> {
    const group = expectLockId('lockId', lockId);
    const lease = expectMs('ttl', ttl);
    const call = this.defaults;
    const { docs, serverNow } = await this.db(call, () => this.store.readAll(this.groupFilter(group), call));
    const held = docs.flatMap((doc) =>
      RESOURCE_TAGS.flatMap((tag) =>
        (this.paths.read(doc).tags?.[tag] ?? []).filter((e) => (e as StoredEntry & Document).group === group).map((entry) => ({ doc, tag, entry })),
      ),
    );
    if (held.length === 0) throw lockError('LockNotFound', call.boom, { detail: `no lock with lockId ${group}`, data: { lockId: group } });
    const now = serverNow?.getTime() ?? this.clock.lower();
    const expired = held.filter(({ entry }) => entry.exp.getTime() <= now).map(({ doc, tag }) => `${String(doc._id)} (${tag})`);
    if (expired.length > 0) {
      throw lockError('LockNotFound', call.boom, { detail: `lockId ${group} has expired locks: ${expired.join(', ')}`, data: { lockId: group, expired } });
    }
    const outcomes = await Promise.allSettled(
      held.map(async ({ doc, tag, entry }) => {
        const renewed = await this.engine.extend({ _id: doc._id }, this.dataOf(tag, entry, doc), { id: entry.id }, lease, call, this.renewal(tag));
        const handle = this.kept.get(entry.id);
        if (handle) Handle.updateExpiry(handle, extensionOf(renewed));
      }),
    );
    const lost = outcomes.flatMap((outcome, i) => (outcome.status === 'rejected' ? [`${String(held[i]!.doc._id)} (${held[i]!.tag})`] : []));
    if (lost.length > 0) {
      throw lockError('LockNotFound', call.boom, { detail: `lockId ${group} lost locks while renewing: ${lost.join(', ')}`, data: { lockId: group, lost } });
    }
    return this.status({ lockId: group });
  }

  private async status(filter: unknown = {}): Promise<LockStatus[]> {
    const f = readStatusFilter(filter);
    const { docs, serverNow } = await this.db(this.defaults, () => this.store.readAll(statusQuery(this.paths, f), this.defaults));
    const now = serverNow?.getTime() ?? this.clock.lower();
    return docs
      .flatMap((doc) => statusesOf(this.paths, doc, now, true))
      .filter((status) => statusMatches(status, f))
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
  }

  private async purge(): Promise<PurgeOutcome> {
    const call = this.defaults;
    const reply = await this.db(call, () => this.store.serverTime(CLOCK_DOCUMENT, call));
    this.clock.observe(reply.value, reply.sentAt, reply.arrivedAt);
    return this.db(call, () => purgeExpired(this.store, this.paths, reply.value, call));
  }

  private purgeEvery(intervalMs: unknown, onError: unknown): { stop(): Promise<void> } {
    const every = expectMs('intervalMs', intervalMs);
    const report = onError === undefined ? () => undefined : expectFunction<(error: unknown) => void>('onError', onError);
    return repeatPurge(() => this.purge(), every, report);
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
      if (p.update !== undefined) throw new TypeError('Expected no `params.update`: a resource document holds no data of yours to update');
      const call = resolveCallOptions(p, this.defaults);
      await traced(
        'release',
        () => ({ operation: 'release', kind: 'resourceLocks', namespace: this.engine.namespace, tag: lock.tag, lockId: lock.id }),
        () => this.clock.local(),
        () => this.engine.release(target, lock.tag, { id: lock.id }, lock, call),
      );
    });
  }

  extend(target: Document, lock: LockData, params: unknown, locktimeout: unknown): Promise<Extension> {
    return inPromiseLibrary(this.PromiseLib, async () => {
      const p = readParams('params', params, HANDLE_PARAMS);
      if (p.update !== undefined) throw new TypeError('Expected no `params.update`: a resource document holds no data of yours to update');
      const call = resolveCallOptions(p, this.defaults);
      const lease = locktimeout === undefined ? Infinity : expectMs('locktimeout', locktimeout);
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
    return lock.expiresAt - this.clock.upper();
  }

  private groupFilter(group: string): Document {
    return { ...RESOURCE_DOCUMENTS, $or: RESOURCE_TAGS.map((tag) => ({ [`${this.paths.tag(tag)}.group`]: group })) };
  }

  private dataOf(tag: string, entry: StoredEntry, doc: Document): LockData {
    return { id: entry.id, tag, timestamp: entry.at.getTime(), fence: fenceOf(this.paths.read(doc)), expiresAt: entry.exp.getTime() };
  }

  private readParams(params: unknown): { p: Record<string, unknown>; call: ResolvedCallOptions; details: LockDetails } {
    const p = readParams('params', params, RESOURCE_LOCK_PARAMS);
    return { p, call: resolveCallOptions(p, this.defaults), details: readLockDetails(p) };
  }

  private async releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void> {
    await this.engine.release(written.target, written.lock.tag, { id: written.lock.id }, written.lock, call);
  }

  private db<T>(call: ResolvedCallOptions, step: () => Promise<T>): Promise<T> {
    return withDbErrors(call.boom, step);
  }
}

