import type { Document } from 'mongodb';
import { DocumentLock } from './document-lock';
import { inspectMethod, type InspectParams, type LockInspection } from './inspection';
import { describedAs } from './lock-kind';
import type { UsingBody } from './scoped-hold';
import type { LockData, LockHandle } from './lock-handle';
import type { PromiseOf } from '../common/promise-types';
import { knownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, LOCK_OPTION_KEYS, readParams, UPDATE_KEYS, type CallOptions, type DocumentOf, type DocumentOptionOf, type DocumentParams, type HoldParams, type LockFilter, type LockOptions, type PromiseLibrary, type UpdateParams } from '../common/options';
import type { MinHoldParams } from '../common/min-hold-params';
import { expectBoolean, expectFilter, expectMs, expectTimestamp } from '../common/validation';
import { FORCE_RELEASE, forcedReleaseRefused, forceReleaseMethod, type ForceReleaseParams } from './forced-release';
import { resolveTagRules } from './relationships';
import { clearQuarantineMethod, type ClearQuarantineParams } from './quarantine';
import type { WaitOptions } from '../waiting/wait-options';

/** The tag under which writeLock stores its entries (a multiLock on the same document sees it as `write`). */
export const WRITE_TAG = 'write';

/** Options of {@link writeLock}. */
export interface WriteLockOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined> extends LockOptions<TSchema, P> {
  /**
   * Lease in ms: after it, the lock is free for the next acquirer.
   * @default 10000
   */
  readonly locktimeout?: number;
  /**
   * Whether `release(filter)` without a proof is monglock v2's forced release (whoever holds the
   * lock loses it). `false` refuses it with a TypeError: taking a lock from its holder is then
   * said explicitly, with `forceRelease(filter)`.
   * @default true (as monglock v2)
   */
  readonly forcedRelease?: boolean;
}

/** Per-call options of `acquire` and `using`. */
export interface WriteLockAcquireParams extends CallOptions, WaitOptions, DocumentParams, MinHoldParams {
  /**
   * Reentrant: an owner id of the caller's choosing. While this owner holds the lock (live by the
   * server's clock), another acquisition by it succeeds at once as a nested hold with the same
   * fencing token; each hold is released on its own, and the lock is free when the last is.
   * @default the owner of the {@link withOwner} context, if any
   */
  readonly owner?: string;
  /** Lease of this lock in ms. @default options.locktimeout */
  readonly locktimeout?: number;
}

/** Per-call options of `release`: the proof of ownership (without one, the release is forced), and a final update. */
export interface WriteLockReleaseParams<TSchema extends Document = Document> extends CallOptions, UpdateParams<TSchema> {
  /** The handle `acquire` resolved, or its `timestamp` (monglock v2). */
  readonly timestamp?: number | LockData;
  /** The handle `acquire` resolved, or its JSON. */
  readonly lock?: LockData;
}

/** Per-call options of `extend`. */
export interface WriteLockExtendParams<TSchema extends Document = Document> extends WriteLockReleaseParams<TSchema> {
  /** New lease in ms from the server's now. @default options.locktimeout */
  readonly locktimeout?: number;
}

const WAIT_KEYS = ['wait', 'signal', 'fair'] as const;
const OPTIONS = knownKeys<WriteLockOptions>()([...LOCK_OPTION_KEYS, 'locktimeout', 'forcedRelease'], {
  locktimeouts: 'a writeLock has one tag (`write`): its lease is `locktimeout`; tags are for multiLock',
  lockRelationships: 'a writeLock has one tag (`write`); relationships are for multiLock',
  wait: 'waiting is per call: `acquire(filter, { wait })`',
});
const NO_TAGS = { ...FIXED_PER_LOCK, tag: 'a writeLock has no tags (its one lock is `write`): `tag` is a multiLock param (`multiLock({ locktimeouts: { read, write } })`)' };
const ACQUIRE = knownKeys<WriteLockAcquireParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'locktimeout', 'owner', 'minHold'], NO_TAGS);
const USING = knownKeys<WriteLockAcquireParams & HoldParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'locktimeout', 'owner', 'maxHold', 'minHold'], NO_TAGS);
const RELEASE = knownKeys<WriteLockReleaseParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'timestamp', 'lock'], {
  ...NO_TAGS,
  locktimeout: 'a release takes no lease (`locktimeout` is for acquire and extend)',
});
const EXTEND = knownKeys<WriteLockExtendParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'timestamp', 'lock', 'locktimeout'], NO_TAGS);

/**
 * One exclusive lock per document; filters and updates are typed against the collection's schema
 * `TSchema`, and every method returns the promises of the `Promise` option `P`.
 */
export interface WriteLock<TSchema extends Document = Document, P = undefined> {
  /**
   * Locks the first document matching `filter`. Rejects with `RessourceNotFound` (404) when none
   * matches, `LockAlreadyTaken` (409) while an unexpired lock is held, `DbError` (500) when
   * MongoDB fails or `timeout` passes.
   */
  acquire<A extends WriteLockAcquireParams = WriteLockAcquireParams>(
    filter: LockFilter<TSchema>,
    params?: A,
  ): PromiseOf<P, LockHandle<TSchema, P, DocumentOf<TSchema, DocumentOptionOf<A>>>>;
  /**
   * Releases the lock proven by `params.lock` or `params.timestamp`; rejects with
   * `LockWasReacquired` (409) if it expired and someone else acquired it. Without a proof this
   * is monglock v2's forced release: whoever holds the lock loses it (refused, with a TypeError,
   * by a lock made with `forcedRelease: false`).
   */
  release(filter: LockFilter<TSchema>, params?: WriteLockReleaseParams<TSchema>): PromiseOf<P, void>;
  /**
   * Takes the lock of the first document matching `filter` from whoever holds it (monglock v2's
   * forced release, said explicitly). Rejects with `RessourceNotFound` (404) when none matches.
   */
  forceRelease(filter: LockFilter<TSchema>, params?: ForceReleaseParams): PromiseOf<P, void>;
  /** Pushes the lease forward from the server's now; rejects with `LockWasReacquired`/`LockNotFound` if the lock was lost. */
  extend(filter: LockFilter<TSchema>, params: WriteLockExtendParams<TSchema>): PromiseOf<P, LockHandle<TSchema, P, never>>;
  /**
   * Acquires, runs `body` while extending the lease automatically, aborts `signal` if the lease
   * is lost, releases in any case, and resolves the body's result (a `commit(update, value)` it
   * returns is applied by the release).
   */
  using<T, A extends WriteLockAcquireParams & HoldParams = WriteLockAcquireParams & HoldParams>(
    filter: LockFilter<TSchema>,
    params: A | undefined,
    body: UsingBody<T, LockHandle<TSchema, P, DocumentOf<TSchema, DocumentOptionOf<A>>>, TSchema>,
  ): PromiseOf<P, T>;
  /**
   * A look without locking: reads, on the primary and writing nothing, the locks of the first
   * document matching `filter` that are live by the server's clock (id, tag, acquisition, expiry),
   * its fencing counter and its fair-mode waiters. Rejects with `RessourceNotFound` (404) when no
   * document matches. What it shows may change the moment after it is read.
   */
  inspect(filter: LockFilter<TSchema>, params?: InspectParams): PromiseOf<P, LockInspection>;
  /**
   * Removes the quarantine mark (`handle.quarantine`) of the document `filter` names, live or
   * ended, in one update: resolves true when a mark was removed, false when it had none (or none
   * matches). Acquisitions are then judged as before the mark.
   */
  clearQuarantine(filter: LockFilter<TSchema>, params?: ClearQuarantineParams): PromiseOf<P, boolean>;
}

/**
 * Creates a writeLock: one exclusive lock per document, stored in the document itself.
 * @throws {TypeError | RangeError} on invalid options.
 * @example
 * const lock = writeLock({ collection: db.collection('orders'), locktimeout: 5000 });
 * const handle = await lock.acquire({ _id: orderId });
 * try { ... } finally { await lock.release({ _id: orderId }, { lock: handle }); }
 */
export function writeLock<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined>(options: WriteLockOptions<TSchema, P>): WriteLock<TSchema, P> {
  const o = readParams('options', options, OPTIONS, false);
  const lease = o.locktimeout === undefined ? 10_000 : expectMs('options.locktimeout', o.locktimeout);
  const forcedRelease = o.forcedRelease === undefined ? true : expectBoolean('options.forcedRelease', o.forcedRelease);
  const core = new DocumentLock(options, {
    options: OPTIONS,
    rules: resolveTagRules({ [WRITE_TAG]: lease }, undefined, { [WRITE_TAG]: { cooperative: [WRITE_TAG] } }),
    name: 'writeLock',
    conflict: 'LockAlreadyTaken',
    reportsReacquired: true,
  });

  /**
   * The proof in `params`, and the caller's filter (validated). A proof key that is given must be
   * a proof: only leaving both out asks for v2's forced release (a `{ lock: undefined }` from a
   * payload without the lock, or a guessable number as `lock`, is refused).
   */
  const proofOf = (filter: unknown, params: unknown, known: typeof RELEASE): { lock?: LockData; timestamp?: number; target: Document } => {
    const target = expectFilter('filter', filter);
    const p = readParams('params', params, known);
    // `in`, not own keys: a proof the params object inherits (a class's getter) is a proof too.
    const byLock = 'lock' in p;
    const byTimestamp = 'timestamp' in p;
    if (byLock && byTimestamp) throw new TypeError('Expected one proof, `params.lock` or `params.timestamp`, not both');
    if (byLock) return { lock: core.lockData('params.lock', p.lock), target };
    if (!byTimestamp) return { target };
    const given = p.timestamp;
    if (typeof given === 'object' && given !== null) return { lock: core.lockData('params.timestamp', given), target };
    return { timestamp: expectTimestamp('params.timestamp', given), target };
  };

  const lock = {
    acquire: (filter: unknown, params: unknown) =>
      core.runAcquisition((cancellation) => core.acquire(filter, WRITE_TAG, readParams('params', params, ACQUIRE), undefined, cancellation)),
    using: (filter: unknown, params: unknown, body: unknown) => core.run((cancellation) => core.using(filter, WRITE_TAG, readParams('params', params, USING), body, cancellation)),
    release: (filter: unknown, params: unknown) =>
      core.run(async () => {
        const { lock, timestamp, target } = proofOf(filter, params, RELEASE);
        const proof = lock ? { id: lock.id } : timestamp !== undefined ? { timestamp } : undefined;
        if (!proof && !forcedRelease) throw forcedReleaseRefused('writeLock');
        await core.releaseWith(target, WRITE_TAG, proof, lock, params);
      }),
    extend: (filter: unknown, params: unknown) =>
      core.run(async () => {
        const { lock, timestamp, target } = proofOf(filter, params, EXTEND);
        if (lock) return core.extendWith(target, lock, { id: lock.id }, params);
        if (timestamp === undefined) throw new TypeError('Expected `params.lock` or `params.timestamp` to prove which lock to extend');
        const claimed: LockData = { id: '', tag: WRITE_TAG, timestamp, fence: 0, expiresAt: 0 };
        return core.extendWith(target, claimed, { timestamp }, params);
      }),
    forceRelease: forceReleaseMethod(core, FORCE_RELEASE, () => WRITE_TAG),
    inspect: inspectMethod(core),
    clearQuarantine: clearQuarantineMethod(core),
  };
  // The methods return the `Promise` option's promises (run() makes them): typed as such here.
  return describedAs(lock, { kind: 'writeLock', tags: core.engine.tags, field: core.engine.field, core }) as unknown as WriteLock<TSchema, P>;
}
