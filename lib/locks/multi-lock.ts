import type { Document } from 'mongodb';
import { DocumentLock } from './document-lock';
import { clearQuarantineMethod, type ClearQuarantineParams } from './quarantine';
import { inspectMethod, type InspectParams, type LockInspection } from './inspection';
import { describedAs } from './lock-kind';
import type { UsingBody } from './scoped-hold';
import type { LockData, LockHandle } from './lock-handle';
import type { PromiseOf } from '../common/promise-types';
import { didYouMean, knownKeys, type KnownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, LOCK_OPTION_KEYS, readParams, UPDATE_KEYS, type CallOptions, type DocumentOf, type DocumentOptionOf, type DocumentParams, type HoldParams, type LockFilter, type LockOptions, type PromiseLibrary, type UpdateParams } from '../common/options';
import type { MinHoldParams } from '../common/min-hold-params';
import { describe, expectFilter, expectSafeName } from '../common/validation';
import { resolveTagRules, withUpgradePreference, type LockRelationships, type TagLimits } from './relationships';
import { forceReleaseMethod, NOT_FORCED, type ForceReleaseParams } from './forced-release';
import type { WaitOptions } from '../waiting/wait-options';

/**
 * Options of {@link multiLock}. `Tag`: the tags it declares, the keys of `locktimeouts` (without
 * it, of `lockRelationships`), taken from them by the compiler.
 */
export interface MultiLockOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined, Tag extends string = string> extends LockOptions<TSchema, P> {
  /** Lease in ms per tag. */
  readonly locktimeouts?: { readonly [T in Tag]: number };
  /** Lease in ms for tags without one in `locktimeouts`. @default undefined (every tag needs one) */
  readonly locktimeout?: number;
  /** `{ [tag]: { cooperative?: tags[], assertive?: tags[] } }`; tags not named are concurrent. */
  readonly lockRelationships?: LockRelationships<Tag>;
  /**
   * Tags that are counting semaphores: `{ editor: 3 }` admits at most 3 permits of `editor` at
   * once (each acquisition takes `params.permits`, default 1), beside the tag's relationships.
   */
  readonly limits?: TagLimits<Tag>;
}

/** Per-call options of `acquire`: a `tag` for a new lock, or the `lock` that `AssertiveLock` carried to continue. `Tag`: the multiLock's tags. */
export interface MultiLockAcquireParams<Tag extends string = string> extends CallOptions, WaitOptions, DocumentParams, MinHoldParams {
  readonly tag?: Tag;
  readonly lock?: LockData;
  /** For a tag in `options.limits`: the permits to take. @default 1 */
  readonly permits?: number;
  /**
   * Reentrant: an owner id of the caller's choosing. While this owner holds the lock (live by the
   * server's clock), another acquisition by it succeeds at once as a nested hold with the same
   * fencing token; each hold is released on its own, and the lock is free when the last is.
   * @default the owner of the {@link withOwner} context, if any
   */
  readonly owner?: string;
  /** Lease of a new lock in ms. @default options.locktimeouts[tag] */
  readonly locktimeout?: number;
}

/** Per-call options of `release`. */
export interface MultiLockReleaseParams<TSchema extends Document = Document> extends CallOptions, UpdateParams<TSchema> {
  /** The lock to release: a handle or its JSON. */
  readonly lock: LockData;
}

/** Per-call options of `extend`. */
export interface MultiLockExtendParams<TSchema extends Document = Document> extends MultiLockReleaseParams<TSchema> {
  /** New lease in ms from the server's now. @default the tag's lease */
  readonly locktimeout?: number;
}

/**
 * Tagged locks with concurrent, cooperative and assertive relationships; filters and updates are
 * typed against the collection's schema `TSchema`, every method returns the promises of the
 * `Promise` option `P`, and a call's `tag` is one of the declared tags `Tag`.
 */
export interface MultiLock<TSchema extends Document = Document, P = undefined, Tag extends string = string> {
  /**
   * With `tag`, takes a new lock; with `lock`, continues an assertive acquisition. Rejects with
   * `RessourceNotFound` (404), `CooperativeLock` (409, nothing written), `AssertiveLock` (409,
   * the lock is registered: call again with `{ lock: err.lock }` — `err.data` with boom),
   * `LockNotFound` (409, the continued lock expired or is gone) or `DbError` (500).
   */
  acquire<A extends MultiLockAcquireParams<Tag> = MultiLockAcquireParams<Tag>>(
    filter: LockFilter<TSchema>,
    params: A,
  ): PromiseOf<P, LockHandle<TSchema, P, DocumentOf<TSchema, DocumentOptionOf<A>>>>;
  /** Removes exactly `params.lock`. Rejects with `LockNotFound` (409) or `RessourceNotFound` (404). */
  release(filter: LockFilter<TSchema>, params: MultiLockReleaseParams<TSchema>): PromiseOf<P, void>;
  /** Pushes `params.lock`'s lease forward from the server's now; rejects with `LockNotFound` if it was lost. */
  extend(filter: LockFilter<TSchema>, params: MultiLockExtendParams<TSchema>): PromiseOf<P, LockHandle<TSchema, P, never>>;
  /**
   * Acquires `params.tag`, or with `params.lock` continues that assertive registration (waiting
   * per `params.wait`, assertive continuations included), runs `body` while extending the lease,
   * aborts `signal` if the lease is lost, always releases.
   */
  using<T, A extends MultiLockAcquireParams<Tag> & HoldParams = MultiLockAcquireParams<Tag> & HoldParams>(
    filter: LockFilter<TSchema>,
    params: A,
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
  /**
   * Takes every lock of `params.tag` of the first document matching `filter` from whoever holds
   * it (a multiLock's `release` always names its lock). Rejects with `RessourceNotFound` (404)
   * when none matches.
   */
  forceRelease<F extends ForceReleaseParams & { readonly tag: Tag } = ForceReleaseParams & { readonly tag: Tag }>(filter: LockFilter<TSchema>, params: F): PromiseOf<P, void>;
}

const WAIT_KEYS = ['wait', 'signal', 'fair'] as const;
const OPTIONS = knownKeys<MultiLockOptions>()([...LOCK_OPTION_KEYS, 'locktimeouts', 'locktimeout', 'lockRelationships', 'limits'], {
  tag: 'the tag is per call: `acquire(filter, { tag })`',
  wait: 'waiting is per call: `acquire(filter, { tag, wait })`',
  forcedRelease: "a multiLock's release always names its lock; `forceRelease(filter, { tag })` takes a tag's locks from their holders",
});
const ACQUIRE = knownKeys<MultiLockAcquireParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'tag', 'lock', 'locktimeout', 'permits', 'owner', 'minHold'], FIXED_PER_LOCK);
const USING = knownKeys<MultiLockAcquireParams & HoldParams>()([...CALL_KEYS, ...WAIT_KEYS, 'document', 'tag', 'lock', 'locktimeout', 'permits', 'owner', 'maxHold', 'minHold'], FIXED_PER_LOCK);
const RELEASE = knownKeys<MultiLockReleaseParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'lock'], {
  ...FIXED_PER_LOCK,
  locktimeout: 'a release takes no lease (`locktimeout` is for acquire and extend)',
  tag: 'a release names its lock (`{ lock }`), whose tag it knows',
});
const EXTEND = knownKeys<MultiLockExtendParams>()([...CALL_KEYS, ...UPDATE_KEYS, 'lock', 'locktimeout'], FIXED_PER_LOCK);
const FORCE = knownKeys<ForceReleaseParams & { tag: string }>()([...CALL_KEYS, 'tag'], NOT_FORCED);

/** The lock `params.lock` names (required: a multiLock or semaphore release or extension names its lock), and the caller's filter, validated. */
function namedLock(core: DocumentLock, filter: unknown, params: unknown, known: KnownKeys): { lock: LockData; target: Document } {
  const target = expectFilter('filter', filter);
  const p = readParams('params', params, known, false);
  if (p.lock === undefined) throw new TypeError('Expected `params.lock` to be the lock to release or extend (a handle or its JSON)');
  return { lock: core.lockData('params.lock', p.lock), target };
}

/** `release` and `extend` of the lock `params.lock` names, `inspect` and `clearQuarantine`: alike for a multiLock and a semaphore. */
export function namedLockMethods(core: DocumentLock, release: KnownKeys, extend: KnownKeys) {
  return {
    release: (filter: unknown, params: unknown) =>
      core.run(async () => {
        const { lock, target } = namedLock(core, filter, params, release);
        await core.releaseWith(target, lock.tag, { id: lock.id }, lock, params);
      }),
    extend: (filter: unknown, params: unknown) =>
      core.run(async () => {
        const { lock, target } = namedLock(core, filter, params, extend);
        return core.extendWith(target, lock, { id: lock.id }, params);
      }),
    inspect: inspectMethod(core),
    clearQuarantine: clearQuarantineMethod(core),
  };
}

/**
 * Creates a multiLock: tagged locks on the caller's documents.
 * @throws {TypeError | RangeError} on invalid tags, leases or relationships (cycles of assertive tags included).
 * @example
 * const rw = multiLock({
 *   collection,
 *   locktimeouts: { read: 2000, write: 20000 },
 *   lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
 * });
 * const handle = await rw.acquire({ _id: 1 }, { tag: 'read' });
 */
export function multiLock<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined, Tag extends string = string>(
  options: MultiLockOptions<TSchema, P, Tag>,
): MultiLock<TSchema, P, Tag> {
  const o = readParams('options', options, OPTIONS, false);
  const core = new DocumentLock(options, {
    options: OPTIONS,
    rules: withUpgradePreference(resolveTagRules(o.locktimeouts, o.locktimeout, o.lockRelationships, o.limits)),
    name: 'multiLock',
    conflict: 'CooperativeLock',
    reportsReacquired: false,
  });

  const tagOf = (params: Record<string, unknown>): string => {
    if (params.tag === undefined) {
      throw new TypeError(`Expected \`params.tag\` (one of ${[...core.engine.tags].join(', ')}): a multiLock acquisition needs \`{ tag }\` (or \`{ lock }\` to continue an assertive one)`);
    }
    const tag = expectSafeName('params.tag', params.tag);
    if (!core.engine.tags.has(tag)) {
      throw new TypeError(`Unknown tag \`${tag}\` in \`params.tag\`.${didYouMean(tag, [...core.engine.tags])} The multiLock declares ${[...core.engine.tags].join(', ')} (its \`locktimeouts\` or \`lockRelationships\` keys)`);
    }
    return tag;
  };

  /** The assertive registration `params.lock` continues, if any; a `tag` beside it must be its tag. */
  const continuedOf = (params: Record<string, unknown>): LockData | undefined => {
    if (params.lock === undefined) return undefined;
    const continued = core.lockData('params.lock', params.lock);
    if (params.tag !== undefined && params.tag !== continued.tag) {
      throw new TypeError(`Expected \`params.tag\` to be the tag of \`params.lock\` (\`${continued.tag}\`), got ${describe(params.tag)}: a continuation keeps its lock's tag`);
    }
    return continued;
  };

  const lock = {
    acquire: (filter: unknown, params: MultiLockAcquireParams<Tag>) => {
      // A continuation's lock is the caller's already: a cancelled continuation leaves it to them.
      const continued = typeof params === 'object' && params !== null && (params as { lock?: unknown }).lock !== undefined;
      if (continued) {
        return core.run(async (cancellation) => {
          const p = readParams('params', params, ACQUIRE);
          return core.acquire(filter, undefined, p, continuedOf(p), cancellation);
        });
      }
      return core.runAcquisition(async (cancellation) => {
        const p = readParams('params', params, ACQUIRE, true);
        return core.acquire(filter, tagOf(p), p, undefined, cancellation);
      });
    },
    using: (filter: unknown, params: unknown, body: unknown) =>
      core.run((cancellation) => {
        const p = readParams('params', params, USING, true);
        const continued = continuedOf(p);
        return core.using(filter, continued?.tag ?? tagOf(p), p, body, cancellation, continued);
      }),
    ...namedLockMethods(core, RELEASE, EXTEND),
    forceRelease: forceReleaseMethod(core, FORCE, (p) => {
      if (p.tag === undefined) throw new TypeError(`Expected \`params.tag\` (one of ${[...core.engine.tags].join(', ')}): the tag whose locks a forced release takes`);
      return tagOf(p);
    }),
  };
  // The methods return the `Promise` option's promises (run() makes them): typed as such here.
  return describedAs(lock, { kind: 'multiLock', tags: core.engine.tags, field: core.engine.field, core }) as unknown as MultiLock<TSchema, P, Tag>;
}
