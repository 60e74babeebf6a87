import type { Document } from 'mongodb';
import { DocumentLock } from './document-lock';
import type { InspectParams, LockInspection } from './inspection';
import type { ClearQuarantineParams } from './quarantine';
import { describedAs } from './lock-kind';
import type { UsingBody } from './scoped-hold';
import type { LockHandle } from './lock-handle';
import { namedLockMethods, type MultiLockExtendParams, type MultiLockReleaseParams } from './multi-lock';
import type { PromiseOf } from '../common/promise-types';
import { knownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, LOCK_OPTION_KEYS, readParams, UPDATE_KEYS, type CallOptions, type DocumentOf, type DocumentOptionOf, type DocumentParams, type HoldParams, type LockFilter, type LockOptions, type PromiseLibrary } from '../common/options';
import type { MinHoldParams } from '../common/min-hold-params';
import { expectMs } from '../common/validation';
import { resolveTagRules } from './relationships';
import { FORCE_RELEASE, forceReleaseMethod, type ForceReleaseParams } from './forced-release';
import type { WaitOptions } from '../waiting/wait-options';

/** The tag under which a semaphore stores its holders (a multiLock on the same document sees it as `permit`). */
export const PERMIT_TAG = 'permit';

/** Options of {@link semaphore}. */
export interface SemaphoreOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined> extends LockOptions<TSchema, P> {
  /** How many permits the document's holders may hold at once; stored in the document, which every process sharing it must agree on. */
  readonly limit: number;
  /** Lease of a holder in ms: after it, its permits are free again. @default 10000 */
  readonly locktimeout?: number;
}

/** Per-call options of `acquire` and `using`. */
export interface SemaphoreAcquireParams extends CallOptions, WaitOptions, DocumentParams, MinHoldParams {
  /** How many permits this holder takes (at most the limit). @default 1 */
  readonly permits?: number;
  /** Lease of this holder in ms. @default options.locktimeout */
  readonly locktimeout?: number;
}

/** Per-call options of `release`: the holder (`{ lock }`, never a bare count), and a final update. */
export type SemaphoreReleaseParams<TSchema extends Document = Document> = MultiLockReleaseParams<TSchema>;

/** Per-call options of `extend`: the holder, and its new lease. */
export type SemaphoreExtendParams<TSchema extends Document = Document> = MultiLockExtendParams<TSchema>;

/**
 * A counting semaphore in each document: at most `limit` permits held at once, each holder its
 * own lock (id, lease, fencing token, `permits`), so a crashed holder's permits come back when its
 * lease ends. Filters and updates are typed against `TSchema`; methods return `P`'s promises.
 */
export interface Semaphore<TSchema extends Document = Document, P = undefined> {
  /**
   * Takes `params.permits` (default 1) of the first document matching `filter`. Rejects with
   * `RessourceNotFound` (404), `SemaphoreFull` (409) while fewer are free by the server's clock,
   * `LimitMismatch` (409) while permits taken under another limit are held, or `DbError` (500).
   */
  acquire<A extends SemaphoreAcquireParams = SemaphoreAcquireParams>(
    filter: LockFilter<TSchema>,
    params?: A,
  ): PromiseOf<P, LockHandle<TSchema, P, DocumentOf<TSchema, DocumentOptionOf<A>>>>;
  /** Gives back the permits of the holder `params.lock`. Rejects with `LockNotFound` (409) or `RessourceNotFound` (404). */
  release(filter: LockFilter<TSchema>, params: SemaphoreReleaseParams<TSchema>): PromiseOf<P, void>;
  /** Pushes the holder's lease forward from the server's now; rejects with `LockNotFound` if it was lost. */
  extend(filter: LockFilter<TSchema>, params: SemaphoreExtendParams<TSchema>): PromiseOf<P, LockHandle<TSchema, P, never>>;
  /** Acquires, runs `body` while extending the lease, aborts `signal` if it is lost, always releases. */
  using<T, A extends SemaphoreAcquireParams & HoldParams = SemaphoreAcquireParams & HoldParams>(
    filter: LockFilter<TSchema>,
    params: A | undefined,
    body: UsingBody<T, LockHandle<TSchema, P, DocumentOf<TSchema, DocumentOptionOf<A>>>, TSchema>,
  ): PromiseOf<P, T>;
  /** A look without locking: the live holders (with their permits), the stored limit and the fair-mode waiters. */
  inspect(filter: LockFilter<TSchema>, params?: InspectParams): PromiseOf<P, LockInspection>;
  /**
   * Removes the quarantine mark (`handle.quarantine`) of the document `filter` names, live or
   * ended, in one update: resolves true when a mark was removed, false when it had none (or none
   * matches). Acquisitions are then judged as before the mark.
   */
  clearQuarantine(filter: LockFilter<TSchema>, params?: ClearQuarantineParams): PromiseOf<P, boolean>;
  /**
   * Takes every permit of the first document matching `filter` from its holders (a semaphore's
   * `release` always names its holder). Rejects with `RessourceNotFound` (404) when none matches.
   */
  forceRelease(filter: LockFilter<TSchema>, params?: ForceReleaseParams): PromiseOf<P, void>;
}

const WAIT_KEYS = ['wait', 'signal', 'fair'] as const;
const OPTIONS = knownKeys<SemaphoreOptions>()([...LOCK_OPTION_KEYS, 'limit', 'locktimeout'], {
  limits: 'a semaphore has one limit: `limit` (per-tag limits are for multiLock)',
  permits: 'permits are per call: `acquire(filter, { permits })`',
  wait: 'waiting is per call: `acquire(filter, { wait })`',
  forcedRelease: "a semaphore's release always names its holder; `forceRelease(filter)` takes every permit from its holders",
});
const NOT_OWNED = {
  ...FIXED_PER_LOCK,
  owner: "a semaphore's holders are counted by permits, not owned: it is not reentrant",
  tag: 'a semaphore has no tags (its holders take `permits`): `tag` is a multiLock param, whose tags may have `limits`',
};
const ACQUIRE = knownKeys<SemaphoreAcquireParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'permits', 'locktimeout', 'minHold'], NOT_OWNED);
const USING = knownKeys<SemaphoreAcquireParams & HoldParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'permits', 'locktimeout', 'maxHold', 'minHold'], NOT_OWNED);
const RELEASE = knownKeys<SemaphoreReleaseParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'lock'], {
  ...FIXED_PER_LOCK,
  permits: 'a release gives back what its holder took: name the holder (`{ lock }`)',
  locktimeout: 'a release takes no lease (`locktimeout` is for acquire and extend)',
});
const EXTEND = knownKeys<SemaphoreExtendParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'lock', 'locktimeout'], FIXED_PER_LOCK);

/**
 * Creates a semaphore: at most `limit` permits of each document held at once.
 * @throws {TypeError | RangeError} on invalid options (a `limit` that is not a whole number from 1 to 10,000 included).
 * @example
 * const exports = semaphore({ collection: db.collection('accounts'), limit: 4, locktimeout: 30_000 });
 * await exports.using({ _id: accountId }, { wait: 60_000 }, async () => runExport(accountId));
 */
export function semaphore<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined>(options: SemaphoreOptions<TSchema, P>): Semaphore<TSchema, P> {
  const o = readParams('options', options, OPTIONS, false);
  if (o.limit === undefined) throw new TypeError('Expected `options.limit`: how many permits a document may have held at once');
  const lease = o.locktimeout === undefined ? 10_000 : expectMs('options.locktimeout', o.locktimeout);
  const core = new DocumentLock(options, {
    options: OPTIONS,
    rules: resolveTagRules({ [PERMIT_TAG]: lease }, undefined, undefined, { [PERMIT_TAG]: o.limit }),
    name: 'semaphore',
    conflict: 'SemaphoreFull',
    reportsReacquired: false,
  });

  const lock = {
    acquire: (filter: unknown, params: unknown) =>
      core.runAcquisition((cancellation) => core.acquire(filter, PERMIT_TAG, readParams('params', params, ACQUIRE), undefined, cancellation)),
    using: (filter: unknown, params: unknown, body: unknown) => core.run((cancellation) => core.using(filter, PERMIT_TAG, readParams('params', params, USING), body, cancellation)),
    ...namedLockMethods(core, RELEASE, EXTEND),
    forceRelease: forceReleaseMethod(core, FORCE_RELEASE, () => PERMIT_TAG),
  };
  // The methods return the `Promise` option's promises (run() makes them): typed as such here.
  return describedAs(lock, { kind: 'semaphore', tags: core.engine.tags, field: core.engine.field, core }) as unknown as Semaphore<TSchema, P>;
}
