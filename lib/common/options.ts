import type { ClientSession, Collection, Document, Filter, UpdateFilter, WithId } from 'mongodb';
import type { BoomLike } from './errors';
import { knownKeys, refuseUnknownKeys, type KnownKeys } from './known-keys';
import { expectBoolean, expectBoom, expectCollection, expectFunction, expectMs, expectObject, expectSafeName, expectShardKey, expectW } from './validation';

/** A promise constructor such as bluebird's, used to wrap what public methods return. */
export type PromiseLibrary = { resolve<T>(value: T | PromiseLike<T>): PromiseLike<T> };

/** Write concern for lock writes: `'majority'` or a number of members (1 or more). */
export type WriteConcernW = 'majority' | number;

/** Options every lock call may override. */
export interface CallOptions {
  /**
   * Bounds every database call, in ms: sent as `maxTimeMS` and `wtimeoutMS`, and enforced by a
   * client-side deadline so that no call hangs.
   * @default 10000
   */
  readonly timeout?: number;
  /**
   * Write concern of acquisitions, continuations and extensions. A write that carries an update
   * of yours (a commit, an extension with `update`) and the write that settles a commit whose
   * reply was lost are sent at `'majority'` whatever this says: a number of members below a
   * majority could be rolled back, and the outcome reported would be untrue. `0` is refused: it
   * cannot confirm an acquisition.
   * @default 'majority'
   */
  readonly w?: WriteConcernW;
  /**
   * Write concern of a plain release. A release rolled back by a failover only keeps the lock
   * until its lease ends; it never admits two holders (see docs/guarantees.md, "Write concerns").
   * @default 1
   */
  readonly releaseW?: WriteConcernW;
  /** A boom module (`require('@hapi/boom')`); errors become boom errors. @default undefined */
  readonly boom?: BoomLike;
}

/** Per-call option of an acquisition: return the locked document with the lock. */
export interface DocumentParams {
  /**
   * `true` returns the whole locked document in `handle.document` (without the lock field), a
   * projection (`{ balance: 1 }`, or `{ history: 0 }`) only those fields: the read of a
   * read-modify-write, in the acquisition's own command.
   * @default undefined (the lock only)
   */
  readonly document?: DocumentOption;
}

/** Per-call options of a release or an extension: your final write, applied by the same atomic update, and the transaction it joins. */
export interface UpdateParams<TSchema extends Document = Document> extends WriteOptions<TSchema> {
  /**
   * Update operators on the locked document (`{ $set: … }`, `{ $inc: … }`; never its lock field
   * or `_id`), applied only while the lock is still held: together with the release (or the
   * extension), or not at all. A write that carries one is sent at `'majority'`, whatever `w` is.
   */
  readonly update?: LockUpdate<TSchema>;
}

/** How `update` is applied (with {@link UpdateParams.update} or `commit()`), and the transaction a release or an extension joins. */
export interface WriteOptions<TSchema extends Document = Document> {
  /**
   * With `update`: what the locked document must also match for the update to apply, for
   * example the array element a positional `$` update names (`{ 'items.sku': 'x' }` for
   * `{ $set: { 'items.$.qty': 3 } }`). A document that does not match: `RessourceNotFound`,
   * nothing written, the lock still held.
   */
  readonly match?: LockFilter<TSchema>;
  /** With `update`: the array filters of its `$[<identifier>]` paths (`mine` is monglock's own). */
  readonly arrayFilters?: readonly Document[];
  /**
   * The caller's session: the write joins its transaction (`session.withTransaction(…)`), and is
   * applied with it, only if the lock is still held when it runs. Inside a transaction, MongoDB's
   * own errors are passed on as they are (so that `withTransaction` retries what it should), and
   * the lock is released whether the transaction commits or aborts. Acquisitions never take one:
   * lock outside the transaction, commit inside it (docs/api.md, "Transactions").
   */
  readonly session?: ClientSession;
}

const WRITE_OPTION_KEYS = ['match', 'arrayFilters', 'session'] as const;
/** The keys of {@link UpdateParams}. */
export const UPDATE_KEYS = ['update', ...WRITE_OPTION_KEYS] as const;
/** The keys of {@link WriteOptions} (`commit()`'s options). */
export const WRITE_OPTIONS = knownKeys<WriteOptions>()(WRITE_OPTION_KEYS);

/**
 * An update of a locked document: the driver's `UpdateFilter<TSchema>` for a typed collection, any
 * update document for an untyped one (the driver's `UpdateFilter<Document>` refuses `$push` there).
 */
export type LockUpdate<TSchema extends Document> = Document extends TSchema ? Document : UpdateFilter<TSchema>;

/** A `document` option: `true`, or a projection. */
export type DocumentOption = true | Readonly<Record<string, 0 | 1 | boolean>>;

/** The `document` option of call params `A`, if it has one. */
export type DocumentOptionOf<A> = A extends { readonly document: infer D } ? D : undefined;

/**
 * What `handle.document` holds for a collection of `TSchema` and the `document` option `D`: the
 * whole document for `true`, the fields an inclusion projection names (and `_id` unless it is
 * excluded), all but those an exclusion projection names; `never` (so `undefined`) without the
 * option. Any document for an untyped collection.
 */
export type DocumentOf<TSchema extends Document, D> = [D] extends [undefined]
  ? never
  : Document extends TSchema
    ? Document
    : D extends true
      ? WithId<TSchema>
      : D extends Readonly<Record<string, 0 | 1 | boolean>>
        ? IncludedKeys<D> extends never
          ? Omit<WithId<TSchema>, keyof D>
          : Pick<WithId<TSchema>, Extract<IncludedKeys<D> | (D extends { readonly _id: 0 | false } ? never : '_id'), keyof WithId<TSchema>>>
        : never;

type IncludedKeys<D> = { [K in keyof D]: D[K] extends 1 | true ? K : never }[keyof D];

/**
 * The filter of a lock call: the driver's `Filter<TSchema>` for a typed collection, any document
 * for an untyped one (whose `_id` the driver would otherwise type as an ObjectId).
 */
export type LockFilter<TSchema extends Document> = Document extends TSchema ? Document : Filter<TSchema>;

/** Per-call option of `using()`: the ceiling on automatic renewal. */
export interface HoldParams {
  /**
   * ms after which the lease is no longer extended: the body's signal aborts with
   * `MaxHoldExceeded` and the lock is released (what the body returns then is not applied).
   * `Infinity` for no ceiling. A body that hangs would otherwise renew forever.
   * @default 600000 (10 minutes)
   */
  readonly maxHold?: number;
}

/**
 * Options shared by {@link writeLock} and {@link multiLock}; `TSchema` is the type of the locked
 * documents, `P` the type of the `Promise` option.
 */
export interface LockOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined> extends CallOptions {
  /** The collection whose documents are locked (typed or not: `db.collection<Order>('orders')`). */
  readonly collection: Collection<TSchema>;
  /**
   * Name of the property that holds the lock in each document.
   * @default 'lock'
   */
  readonly field?: string;
  /**
   * Promise library whose promises public methods return, for example bluebird (whose promise
   * types `import 'monglock/bluebird'` gives them). The global `Promise` is never touched.
   * @default the native Promise
   */
  readonly Promise?: P;
  /**
   * Fair mode: waiters (`wait`) take a ticket in the document's queue and acquire first come,
   * first served; newcomers queue behind them. Tags that are concurrent never wait for each other.
   * A call's own `fair` overrides it.
   * @default false
   */
  readonly fair?: boolean;
  /**
   * Wakes this process's waiters when another process changes a lock they wait for, through one
   * change stream per process and collection, open while some of them wait (replica sets and
   * sharded clusters; elsewhere, or when the stream breaks, they poll as with `false`). See
   * docs/guarantees.md, "Waking waiters".
   * @default true
   */
  readonly changeStreams?: boolean;
  /**
   * The local clock, in ms since the epoch. Only the elapsed time between readings matters:
   * lease times come from the server's clock (see docs/guarantees.md, "Server-side time").
   * @default a monotonic clock (`performance.timeOrigin + performance.now()`)
   */
  readonly clock?: () => number;
  /**
   * The largest difference, in ms, between the clocks of the deployment's servers that monglock
   * may assume: on a sharded cluster, every mongos's and every shard primary's clock lies within
   * it of every shard primary's. Leases are judged so that a skew up to it never admits a second
   * holder (a lock nobody releases is taken over up to about 4 × later); a larger skew that a
   * reply shows fails the call with `DbError` naming it. `monglock doctor` measures it. Give every
   * process of a deployment the same value. See docs/guarantees.md, "Several clocks".
   * @default 1000 on a sharded cluster, 0 elsewhere (one clock: the primary's)
   */
  readonly maxClockSkew?: number;
  /**
   * The collection's shard key, as `sh.shardCollection` took it (`{ region: 1, _id: 1 }`): every
   * write to a locked document then names its values, which mongos 4.4–6.x needs. Give it when the
   * lock's database user may not read `config.collections`.
   * @default read from the cluster's metadata on a sharded cluster; none elsewhere
   */
  readonly shardKey?: Readonly<Record<string, 1 | -1 | 'hashed'>>;
}

/** Keys of {@link CallOptions}: every lock call takes them. */
export const CALL_KEYS = ['timeout', 'w', 'releaseW', 'boom'] as const;
/** Keys of {@link LockOptions}. */
export const LOCK_OPTION_KEYS = [...CALL_KEYS, 'collection', 'field', 'Promise', 'fair', 'changeStreams', 'clock', 'maxClockSkew', 'shardKey'] as const;

/** Why a call refuses keys that are fixed when the lock is made (monglock v2 took some of them per call), or that belong to a release. */
export const FIXED_PER_LOCK: Readonly<Record<string, string>> = {
  session:
    'an acquisition never joins a transaction (its lock must be seen by others at once): lock outside the transaction, and pass the session to the release or commit inside it (`handle.release({ update, session })`, `commit(update, value, { session })`)',
  collection: 'a lock\'s collection is fixed when the lock is made (monglock v2 took it per call): make one lock per collection',
  field: 'the lock\'s field is fixed when the lock is made',
  Promise: 'the promise library is fixed when the lock is made',
  clock: 'the clock is fixed when the lock is made',
  changeStreams: 'how waiters learn of changes made elsewhere is fixed when the lock is made',
  maxClockSkew: 'the skew assumed between clocks is fixed when the lock is made',
  shardKey: 'the shard key is fixed when the lock is made',
  locktimeouts: 'leases per tag are set when the multiLock is made; a call takes `locktimeout`',
  lockRelationships: 'relationships are set when the multiLock is made',
};

/**
 * `value` as the options or params object `name`: undefined is `{}` (when `optional`), anything but
 * a plain object, or an object with a key `known` does not list, is refused with a TypeError.
 */
export function readParams(name: string, value: unknown, known: KnownKeys, optional = true): Record<string, unknown> {
  if (value === undefined && optional) return {};
  const object = expectObject(name, value);
  refuseUnknownKeys(name, object, known);
  return object;
}

/** Call options with every default filled in. */
export interface ResolvedCallOptions {
  readonly timeout: number;
  readonly w: WriteConcernW;
  readonly releaseW: WriteConcernW;
  readonly boom: BoomLike | undefined;
  /** A release's or an extension's session (the caller's transaction); never an acquisition's. */
  readonly session?: ClientSession;
  /** Which class the call's commands queue in while its client's lock commands are at their cap (lib/engine/command-gate.ts); none: `attempt`. */
  readonly priority?: CommandPriority;
  /** An acquisition's: true once its call was abandoned; an attempt still queued then is not sent (lib/engine/stamped-write.ts). */
  readonly abandoned?: () => boolean;
}

/** The order a client's queued lock commands leave in: releases (commits among them), extensions, cleanups (releases of locks nobody relies on), then attempts and reads. */
export type CommandPriority = 'release' | 'extend' | 'cleanup' | 'attempt';

/** `call` with its commands queued in class `priority` (the same object when it already is). */
export function withPriority<T extends ResolvedCallOptions>(call: T, priority: CommandPriority): T {
  return call.priority === priority ? call : { ...call, priority };
}

/** ms since the epoch that never jumps (wall-clock steps do not move it): what elapsed time is measured with. */
export function monotonicNow(): number {
  return performance.timeOrigin + performance.now();
}

/** Fills in and validates the call options: explicit values (0 and `false` too) are never replaced by defaults. */
export function resolveCallOptions(
  params: Record<string, unknown>,
  defaults: ResolvedCallOptions,
  prefix = 'params',
): ResolvedCallOptions {
  return {
    timeout: params.timeout === undefined ? defaults.timeout : expectMs(`${prefix}.timeout`, params.timeout),
    w: params.w === undefined ? defaults.w : expectW(`${prefix}.w`, params.w),
    releaseW: params.releaseW === undefined ? defaults.releaseW : expectW(`${prefix}.releaseW`, params.releaseW),
    boom: params.boom === undefined ? defaults.boom : expectBoom(`${prefix}.boom`, params.boom),
  };
}

/** Validates the options shared by writeLock and multiLock. */
export function resolveLockOptions(options: unknown, known: KnownKeys): {
  collection: Collection<Document>;
  field: string;
  call: ResolvedCallOptions;
  Promise: PromiseLibrary | undefined;
  clock: () => number;
  fair: boolean;
  changeStreams: boolean;
  deployment: { maxClockSkew?: number; shardKey?: Readonly<Record<string, unknown>> };
} {
  const o = readParams('options', options, known, false);
  const field = o.field === undefined ? 'lock' : expectSafeName('options.field', o.field);
  if (field === '_id') throw new TypeError('Expected `options.field` not to be `_id`');
  let PromiseLib: PromiseLibrary | undefined;
  if (o.Promise !== undefined) {
    PromiseLib = o.Promise as PromiseLibrary;
    expectFunction('options.Promise.resolve', (PromiseLib as { resolve?: unknown }).resolve);
  }
  return {
    collection: expectCollection('options.collection', o.collection),
    field,
    call: resolveCallOptions(o, { timeout: 10_000, w: 'majority', releaseW: 1, boom: undefined }, 'options'),
    Promise: PromiseLib,
    clock: o.clock === undefined ? monotonicNow : expectFunction<() => number>('options.clock', o.clock),
    fair: o.fair === undefined ? false : expectBoolean('options.fair', o.fair),
    changeStreams: o.changeStreams === undefined ? true : expectBoolean('options.changeStreams', o.changeStreams),
    deployment: {
      ...(o.maxClockSkew !== undefined && { maxClockSkew: expectMs('options.maxClockSkew', o.maxClockSkew, 0) }),
      ...(o.shardKey !== undefined && { shardKey: expectShardKey('options.shardKey', o.shardKey) }),
    },
  };
}
