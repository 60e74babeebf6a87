import { randomBytes } from 'node:crypto';
import type { Document } from 'mongodb';
import { isLockError, lockError, withDbErrors } from './errors';
import { AssertivePending, expiryOf, fenceOf, LockEngine, NEVER, type AcquireExtras } from './lock-engine';
import { LockHandle, type HandleOwner, type LockData } from './lock-handle';
import {
  describe,
  expectFunction,
  expectMs,
  expectObject,
  MAX_MS,
  resolveCallOptions,
  resolveLockOptions,
  type CallOptions,
  type LockOptions,
  type PromiseLibrary,
  type ResolvedCallOptions,
} from './options';
import { resolveTagRules } from './relationships';
import { inPromiseLibrary } from './promise-library';
import { holdWhile, type UsingBody } from './scoped-hold';
import { ServerClock } from './server-clock';
import { ResourceStore } from './store';
import { liveEntries, LockPaths, noLiveEntry, type StoredEntry } from './stored-format';
import { abortable, readWaitParams, retryWithin, type WaitOptions } from './waiting';

/** The two tags of a resource: exclusive (cooperative with both) and shared (cooperative with exclusive). */
export type ResourceLockType = 'exclusive' | 'shared';

const TAGS: readonly ResourceLockType[] = ['exclusive', 'shared'];
const META_ID = 'monglock.meta';
const FIELD = 'lock';
/** How old the clock estimate may be before a document is created with an unchecked stamp, in ms. */
const CLOCK_SYNC_MAX_AGE = 60_000;

/** Options of {@link resourceLocks}. */
export interface ResourceLocksOptions extends Omit<LockOptions, 'field'> {
  /**
   * How long after its last lease ends an abandoned resource document may be deleted by the TTL
   * index (garbage collection only; expiry never waits for it), in ms.
   * @default 3600000 (one hour)
   */
  readonly gcAfter?: number;
}

/** Who holds a lock, and for how long. */
export interface LockDetails {
  readonly owner?: string;
  readonly host?: string;
  readonly comment?: string;
  /** Lease in ms. None: the lock never expires (until unlocked). */
  readonly ttl?: number;
}

/** Per-call options of `xlock`/`slock`/`using`. */
export interface ResourceLockParams extends LockDetails, CallOptions, WaitOptions {}

/** A held lock as reported by `status`, `unlock` and `renew`. */
export interface LockStatus {
  readonly resource: string;
  readonly lockId: string;
  readonly type: ResourceLockType;
  readonly owner: string | null;
  readonly host: string | null;
  readonly comment: string | null;
  readonly createdAt: Date;
  readonly renewedAt: Date | null;
  /** null: no expiry. */
  readonly expiresAt: Date | null;
  /** Remaining lease in ms when read (-1: no expiry). */
  readonly ttl: number;
}

/** Filter of `status`: every field narrows the result. */
export interface StatusFilter {
  readonly resource?: string;
  readonly lockId?: string;
  readonly owner?: string;
  readonly createdBefore?: Date;
  readonly createdAfter?: Date;
  /** Remaining lease below this many ms (locks without expiry never match). */
  readonly ttlBelow?: number;
  /** Remaining lease at least this many ms (locks without expiry always match). */
  readonly ttlAtLeast?: number;
}

/** A held resource lock: a {@link LockHandle} that also names its resource, lock id and type. */
export class ResourceLockHandle extends LockHandle {
  constructor(
    data: LockData,
    owner: HandleOwner,
    readonly resource: string,
    readonly lockId: string,
    /** The lease it was taken with, in ms (undefined: no expiry); what `extend()` renews to by default. */
    readonly ttl: number | undefined,
  ) {
    super(data, owner, { resource });
  }

  get type(): ResourceLockType {
    return this.tag as ResourceLockType;
  }

  /** Renews the lease to `locktimeout` ms (default: its own `ttl`) from the server's now. */
  override extend(locktimeout: number | undefined = this.ttl, params?: object): Promise<this> {
    return super.extend(locktimeout, params);
  }

  override toJSON(): LockData & { resource: string; lockId: string } {
    return { ...super.toJSON(), resource: this.resource, lockId: this.lockId };
  }
}

/** A client over a lock collection: named resources, exclusive and shared locks, lock groups. */
export interface ResourceLocks {
  /** Creates the unique index on `resource`, lookup indexes by lock id, owner and expiry, and the TTL index on `gcAt`. */
  createIndexes(): Promise<string[]>;
  /** Exclusive lock on `resource` for the group `lockId`; creates the resource document on first use. */
  xlock(resource: string, lockId: string, params?: ResourceLockParams): Promise<ResourceLockHandle>;
  /** Shared lock: at most `maxConcurrent` shared holders (negative: unlimited), one per lock id. */
  slock(resource: string, lockId: string, params?: ResourceLockParams, maxConcurrent?: number): Promise<ResourceLockHandle>;
  /** Releases every lock of the group `lockId`, on every resource; resolves what it released, newest first. */
  unlock(lockId: string): Promise<LockStatus[]>;
  /** Renews every lock of the group to `ttl` ms from the server's now; rejects `LockNotFound` naming any missing or expired one. */
  renew(lockId: string, ttl: number): Promise<LockStatus[]>;
  /** The locks held (unexpired), filtered. */
  status(filter?: StatusFilter): Promise<LockStatus[]>;
  /** Removes expired locks and deletes resource documents that hold none. */
  purge(): Promise<{ documentsPruned: number; documentsDeleted: number }>;
  /** Runs `purge` every `intervalMs`; `stop()` ends it and waits for a run in flight. */
  purgeEvery(intervalMs: number, onError?: (error: unknown) => void): { stop(): Promise<void> };
  /** Scoped lock: acquires (exclusive, or shared with `shared: true`), renews while `body` runs, aborts its signal if lost, releases. */
  using<T>(
    resource: string,
    lockId: string,
    params: ResourceLockParams & { shared?: boolean; maxConcurrent?: number },
    body: UsingBody<T, ResourceLockHandle>,
  ): Promise<T>;
}

/**
 * Creates a resource-lock client over a dedicated lock collection (one document per resource).
 * @throws {TypeError | RangeError} on invalid options.
 * @example
 * const locks = resourceLocks({ collection: db.collection('locks') });
 * await locks.createIndexes();
 * const lock = await locks.xlock('invoice-run', 'job-42', { owner: 'billing', ttl: 30_000 });
 * await locks.unlock('job-42');
 */
export function resourceLocks(options: ResourceLocksOptions): ResourceLocks {
  return new ResourceLockClient(options).api();
}

class ResourceLockClient implements HandleOwner {
  private readonly store: ResourceStore;
  private readonly engine: LockEngine;
  private readonly clock: ServerClock;
  private readonly paths = new LockPaths(FIELD);
  private readonly defaults: ResolvedCallOptions;
  private readonly PromiseLib: PromiseLibrary | undefined;
  private readonly gcAfter: number;
  /** Resources this client has seen exist: locked with the engine's checked update directly. */
  private readonly known = new Set<string>();

  constructor(options: ResourceLocksOptions) {
    const o = expectObject('options', options);
    if (o.field !== undefined) throw new TypeError('`options.field` is fixed (`lock`) for resource locks');
    const resolved = resolveLockOptions(options);
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

  api(): ResourceLocks {
    const run = <T>(body: () => Promise<T>): Promise<T> => this.run(body);
    return {
      createIndexes: () => run(() => this.createIndexes()),
      xlock: (resource, lockId, params) => run(() => this.lock('exclusive', resource, lockId, params, -1)),
      slock: (resource, lockId, params, maxConcurrent = -1) => run(() => this.lock('shared', resource, lockId, params, maxConcurrent)),
      unlock: (lockId) => run(() => this.unlock(lockId)),
      renew: (lockId, ttl) => run(() => this.renew(lockId, ttl)),
      status: (filter) => run(() => this.status(filter)),
      purge: () => run(() => this.purge()),
      purgeEvery: (intervalMs, onError) => this.purgeEvery(intervalMs, onError),
      using: (resource, lockId, params, body) => run(() => this.using(resource, lockId, params, body)),
    };
  }

  private run<T>(body: () => Promise<T>): Promise<T> {
    return inPromiseLibrary(this.PromiseLib, body);
  }

  private async createIndexes(): Promise<string[]> {
    const indexes: Array<{ key: Document; name: string; unique?: boolean; expireAfterSeconds?: number }> = [
      { key: { resource: 1 }, name: 'resource_unique', unique: true },
    ];
    for (const tag of TAGS) {
      for (const field of ['group', 'owner', 'exp']) {
        indexes.push({ key: { [`${this.paths.tag(tag)}.${field}`]: 1 }, name: `${tag}_${field}` });
      }
    }
    indexes.push({ key: { gcAt: 1 }, name: 'gc_ttl', expireAfterSeconds: 0 });
    return this.store.createIndexes(indexes, this.defaults);
  }

  private async lock(type: ResourceLockType, resource: unknown, lockId: unknown, params: unknown, maxConcurrent: unknown): Promise<ResourceLockHandle> {
    const name = expectText('resource', resource, 512);
    const group = expectText('lockId', lockId, 256);
    const { p, call, details } = this.readParams(params);
    const limit = expectLimit(maxConcurrent);
    const lease = details.ttl ?? Infinity;
    const waiting = readWaitParams(p);
    if (waiting.signal?.aborted) throw waiting.signal.reason;
    const entry = { group, owner: details.owner ?? null, host: details.host ?? null, comment: details.comment ?? null, renewedAt: null };
    const extras: AcquireExtras = {
      entry,
      conditions: (at) => (type === 'shared' ? this.sharedConditions(group, limit, at) : []),
      update: (_at, exp) => ({ $max: { gcAt: this.gcDate(exp) } }),
    };
    const attempt = async (): Promise<LockData> => {
      for (let round = 1; ; round++) {
        if (!this.known.has(name)) {
          const created = await this.createWithLock(name, type, lease, entry, call);
          this.known.add(name);
          if (created) return created;
        }
        try {
          const outcome = await this.engine.acquire({ resource: name }, type, lease, call, extras);
          if (outcome instanceof AssertivePending) throw new Error('resource locks have no assertive tags');
          return outcome;
        } catch (error) {
          if (!isLockError(error, 'RessourceNotFound') || round > 1) throw error;
          this.known.delete(name); // purged meanwhile: create it again
        }
      }
    };
    const data = await retryWithin(waiting, () => abortable(attempt(), waiting.signal), (error) => isLockError(error, 'LockAlreadyTaken'));
    return new ResourceLockHandle(data, this, name, group, details.ttl);
  }

  /**
   * First use of a resource by this client: inserts its document with the lock in it, unless it
   * exists. MongoDB refuses `$expr` in an upsert's filter, so this stamp is not checked by the
   * server; it comes from a clock estimate synchronised with the server first (a lower bound).
   */
  private async createWithLock(resource: string, type: ResourceLockType, lease: number, entry: Document, call: ResolvedCallOptions): Promise<LockData | undefined> {
    if (!this.clock.synchronizedWithin(CLOCK_SYNC_MAX_AGE)) await this.synchronize(call);
    const stamp = this.clock.stamp();
    const exp = expiryOf(stamp, lease);
    const id = randomBytes(16).toString('hex');
    const stored: StoredEntry & Document = { ...entry, id, at: new Date(stamp), exp: new Date(exp) };
    const epoch = stamp * 1000;
    const doc = { [FIELD]: { epoch, fence: 1, tags: { [type]: [stored] } }, gcAt: this.gcDate(new Date(exp)) };
    const inserted = await this.db(call, () => this.store.insertIfMissing({ resource }, doc, call));
    return inserted ? { id, tag: type, timestamp: stamp, fence: epoch + 1, expiresAt: exp } : undefined;
  }

  private async synchronize(call: ResolvedCallOptions): Promise<Date> {
    const { serverNow, arrivedAt } = await this.db(call, () => this.store.serverTime(META_ID, call));
    this.clock.observe(serverNow, arrivedAt);
    return serverNow;
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

  /** What renewing a lock of `tag` also writes: its renewal time, and the later GC date. */
  private renewal(tag: string): (at: Date, exp: Date) => Document {
    return (at, exp) => ({ $set: { [`${this.paths.tag(tag)}.$[mine].renewedAt`]: at }, $max: { gcAt: this.gcDate(exp) } });
  }

  private gcDate(exp: Date): Date {
    return new Date(Math.min(NEVER, exp.getTime() + this.gcAfter));
  }

  private async unlock(lockId: unknown): Promise<LockStatus[]> {
    const group = expectText('lockId', lockId, 256);
    const call = this.defaults;
    const { docs, serverNow } = await this.db(call, () => this.store.readAll(this.groupFilter(group), call));
    const released = await Promise.all(
      docs.map(async (doc) => {
        const pull = Object.fromEntries(TAGS.map((tag) => [this.paths.tag(tag), { group }]));
        const before = await this.db(call, () => this.store.updateReturningBefore({ _id: doc._id }, { $pull: pull }, call));
        return this.statuses(before, serverNow).filter((status) => status.lockId === group);
      }),
    );
    return released.flat().sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime());
  }

  private async renew(lockId: unknown, ttl: unknown): Promise<LockStatus[]> {
    const group = expectText('lockId', lockId, 256);
    const lease = expectMs('ttl', ttl);
    const call = this.defaults;
    const { docs, serverNow } = await this.db(call, () => this.store.readAll(this.groupFilter(group), call));
    const held = docs.flatMap((doc) =>
      TAGS.flatMap((tag) => (this.paths.read(doc).tags?.[tag] ?? []).filter((e) => (e as Document).group === group).map((entry) => ({ doc, tag, entry }))),
    );
    if (held.length === 0) throw lockError('LockNotFound', call.boom, { detail: `no lock with lockId ${group}`, data: { lockId: group } });
    const now = serverNow?.getTime() ?? this.clock.stamp();
    const expired = held.filter(({ entry }) => entry.exp.getTime() <= now).map(({ doc, tag }) => `${String(doc.resource)} (${tag})`);
    if (expired.length > 0) {
      throw lockError('LockNotFound', call.boom, { detail: `lockId ${group} has expired locks: ${expired.join(', ')}`, data: { lockId: group, expired } });
    }
    const outcomes = await Promise.allSettled(
      held.map(({ doc, tag, entry }) =>
        this.engine.extend({ resource: doc.resource }, this.dataOf(tag, entry, doc), { id: entry.id }, lease, call, this.renewal(tag)),
      ),
    );
    const lost = outcomes.flatMap((outcome, i) => (outcome.status === 'rejected' ? [`${String(held[i]!.doc.resource)} (${held[i]!.tag})`] : []));
    if (lost.length > 0) {
      throw lockError('LockNotFound', call.boom, { detail: `lockId ${group} lost locks while renewing: ${lost.join(', ')}`, data: { lockId: group, lost } });
    }
    return this.status({ lockId: group });
  }

  private async status(filter: unknown = {}): Promise<LockStatus[]> {
    const f = readStatusFilter(filter);
    const match: Document = { resource: f.resource ?? { $type: 'string' } };
    const elem: Document = { ...(f.lockId !== undefined ? { group: f.lockId } : {}), ...(f.owner !== undefined ? { owner: f.owner } : {}) };
    if (Object.keys(elem).length > 0) match.$or = TAGS.map((tag) => ({ [this.paths.tag(tag)]: { $elemMatch: elem } }));
    const { docs, serverNow } = await this.db(this.defaults, () => this.store.readAll(match, this.defaults));
    return docs
      .flatMap((doc) => this.statuses(doc, serverNow, true))
      .filter(
        (s) =>
          (f.lockId === undefined || s.lockId === f.lockId) &&
          (f.owner === undefined || s.owner === f.owner) &&
          (f.createdBefore === undefined || s.createdAt < f.createdBefore) &&
          (f.createdAfter === undefined || s.createdAt > f.createdAfter) &&
          (f.ttlBelow === undefined || (s.ttl >= 0 && s.ttl < f.ttlBelow)) &&
          (f.ttlAtLeast === undefined || s.ttl < 0 || s.ttl >= f.ttlAtLeast),
      )
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
  }

  private async purge(): Promise<{ documentsPruned: number; documentsDeleted: number }> {
    const call = this.defaults;
    const now = await this.synchronize(call);
    const expiredSomewhere = { $or: TAGS.map((tag) => ({ [`${this.paths.tag(tag)}.exp`]: { $lte: now } })) };
    const pull = Object.fromEntries(TAGS.map((tag) => [this.paths.tag(tag), { exp: { $lte: now } }]));
    const documentsPruned = await this.db(call, () => this.store.updateMany({ resource: { $type: 'string' }, ...expiredSomewhere }, { $pull: pull }, call));
    const empty = { resource: { $type: 'string' }, $and: TAGS.map((tag) => noLiveEntry(this.paths, tag, now)) };
    const documentsDeleted = await this.db(call, () => this.store.deleteMany(empty, call));
    return { documentsPruned, documentsDeleted };
  }

  private purgeEvery(intervalMs: unknown, onError: unknown): { stop(): Promise<void> } {
    const every = expectMs('intervalMs', intervalMs);
    const report = onError === undefined ? () => undefined : expectFunction<(error: unknown) => void>('onError', onError);
    let running: Promise<unknown> = Promise.resolve();
    const timer = setInterval(() => {
      running = running.then(() => this.purge()).catch(report);
    }, every);
    timer.unref();
    return {
      stop: async () => {
        clearInterval(timer);
        await running;
      },
    };
  }

  private async using<T>(resource: unknown, lockId: unknown, params: unknown, body: unknown): Promise<T> {
    const work = expectFunction<UsingBody<T, ResourceLockHandle>>('body', body);
    const p = expectObject('params', params);
    const handle = p.shared === true
      ? await this.lock('shared', resource, lockId, params, p.maxConcurrent ?? -1)
      : await this.lock('exclusive', resource, lockId, params, -1);
    const { call, details } = this.readParams(params);
    return holdWhile(
      handle,
      {
        leaseMs: details.ttl ?? Infinity,
        now: () => this.clock.stamp(),
        callParams: { timeout: call.timeout, w: call.w, boom: call.boom },
        outerSignal: readWaitParams(p).signal,
        boom: call.boom,
      },
      work,
    );
  }

  // HandleOwner: what a ResourceLockHandle calls back into.

  release(filter: Document, lock: LockData, params?: object): Promise<void> {
    return this.run(async () => {
      const call = resolveCallOptions(params === undefined ? {} : expectObject('params', params), this.defaults);
      await this.engine.release(filter, lock.tag, { id: lock.id }, lock, call);
    });
  }

  extend(filter: Document, lock: LockData, params?: object): Promise<LockData> {
    return this.run(async () => {
      const p = params === undefined ? {} : expectObject('params', params);
      const call = resolveCallOptions(p, this.defaults);
      const lease = p.locktimeout === undefined ? Infinity : expectMs('params.locktimeout', p.locktimeout);
      return this.engine.extend(filter, lock, { id: lock.id }, lease, call, this.renewal(lock.tag));
    });
  }

  guard(filter: Document, lock: LockData, extra?: Document): Document {
    return this.engine.guard(filter, lock, extra);
  }

  private groupFilter(group: string): Document {
    return { resource: { $type: 'string' }, $or: TAGS.map((tag) => ({ [`${this.paths.tag(tag)}.group`]: group })) };
  }

  private dataOf(tag: string, entry: StoredEntry, doc: Document): LockData {
    return { id: entry.id, tag, timestamp: entry.at.getTime(), fence: fenceOf(this.paths.read(doc)), expiresAt: entry.exp.getTime() };
  }

  /** The statuses of a resource document's locks (only the unexpired ones when `liveOnly`). */
  private statuses(doc: Document | null, serverNow: Date | undefined, liveOnly = false): LockStatus[] {
    if (!doc) return [];
    const now = serverNow?.getTime() ?? this.clock.stamp();
    const lock = this.paths.read(doc);
    return TAGS.flatMap((tag) =>
      (liveOnly ? liveEntries(lock, tag, now) : (lock.tags?.[tag] ?? [])).map((entry): LockStatus => {
        const e = entry as StoredEntry & Document;
        const never = e.exp.getTime() >= NEVER;
        return {
          resource: String(doc.resource),
          lockId: String(e.group),
          type: tag,
          owner: (e.owner as string | null) ?? null,
          host: (e.host as string | null) ?? null,
          comment: (e.comment as string | null) ?? null,
          createdAt: e.at,
          renewedAt: (e.renewedAt as Date | null) ?? null,
          expiresAt: never ? null : e.exp,
          ttl: never ? -1 : e.exp.getTime() - now,
        };
      }),
    );
  }

  private readParams(params: unknown): { p: Record<string, unknown>; call: ResolvedCallOptions; details: LockDetails } {
    const p = params === undefined ? {} : expectObject('params', params);
    const details: LockDetails = {
      owner: optionalText('params.owner', p.owner),
      host: optionalText('params.host', p.host),
      comment: optionalText('params.comment', p.comment),
      ttl: p.ttl === undefined ? undefined : expectMs('params.ttl', p.ttl),
    };
    return { p, call: resolveCallOptions(p, this.defaults), details };
  }

  private db<T>(call: ResolvedCallOptions, step: () => Promise<T>): Promise<T> {
    return withDbErrors(call.boom, step);
  }
}

function expectText(name: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new TypeError(`Expected \`${name}\` to be a non-empty string of at most ${max} characters, got ${describe(value)}`);
  }
  return value;
}

function optionalText(name: string, value: unknown): string | undefined {
  return value === undefined ? undefined : expectText(name, value, 1024);
}

function expectLimit(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new TypeError(`Expected \`maxConcurrent\` to be an integer (negative: unlimited), got ${describe(value)}`);
  }
  if (value === 0) throw new RangeError('Expected `maxConcurrent` not to be 0 (nobody could ever hold the lock); use a negative number for unlimited');
  return value;
}

function readStatusFilter(filter: unknown): StatusFilter {
  const f = expectObject('filter', filter);
  const date = (name: string, value: unknown): Date | undefined => {
    if (value === undefined) return undefined;
    if (!(value instanceof Date) || Number.isNaN(value.getTime())) throw new TypeError(`Expected \`filter.${name}\` to be a Date, got ${describe(value)}`);
    return value;
  };
  return {
    resource: f.resource === undefined ? undefined : expectText('filter.resource', f.resource, 512),
    lockId: f.lockId === undefined ? undefined : expectText('filter.lockId', f.lockId, 256),
    owner: optionalText('filter.owner', f.owner),
    createdBefore: date('createdBefore', f.createdBefore),
    createdAfter: date('createdAfter', f.createdAfter),
    ttlBelow: f.ttlBelow === undefined ? undefined : expectMs('filter.ttlBelow', f.ttlBelow, 0),
    ttlAtLeast: f.ttlAtLeast === undefined ? undefined : expectMs('filter.ttlAtLeast', f.ttlAtLeast, 0),
  };
}
