import type { Document } from 'mongodb';
import type { LockData } from '../protocol/lock-data';
import { knownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, UPDATE_KEYS, type CallOptions, type UpdateParams } from '../common/options';
import type { ConversionAftermath } from './conversion-run';

/** Per-call options of `handle.release()` and `handle.extend()`. */
export interface HandleParams<TSchema extends Document = Document> extends CallOptions, UpdateParams<TSchema> {}

/** The keys of {@link HandleParams}: what the lock behind a handle accepts from it. */
export const HANDLE_PARAMS = knownKeys<HandleParams>()([...CALL_KEYS, ...UPDATE_KEYS], {
  ...FIXED_PER_LOCK,
  lock: 'a handle releases or extends itself: `handle.release()`, or `lock.release(filter, { lock: handle })`',
  locktimeout: 'the lease is the first argument: `handle.extend(ms, params)`',
});

/** What a lease keeper says of the extension it asks for. */
export interface KeptExtension {
  /** ms before the lease may end at which the keeper gives up. */
  readonly marginMs: number;
  /** Aborted when the keeper stops: an extension not yet sent is left out. */
  readonly signal: AbortSignal;
}

/** A lease's new end, and when (by the server's clock) the write that set it was applied. */
export interface Extension {
  readonly expiresAt: number;
  readonly appliedAt: number;
}

/** What a handle calls back into: the lock that made it. `target` is the locked document's `{ _id }`. */
export interface HandleOwner {
  /** Releases `lock`; `params` as the caller passed them (validated against {@link HANDLE_PARAMS}); a commit of a group records its id. */
  release(target: Document, lock: LockData, params: unknown, group?: string): Promise<void>;
  /** Ends the hold of `lock` with a quarantine mark (exclusive document locks only); `params` as passed. */
  quarantine?(target: Document, lock: LockData, params: unknown): Promise<void>;
  /** Converts `lock` to `tag` (multiLock locks only); `params` as passed; when it rejects, `aftermath` hears what became of the lock. */
  convert?(target: Document, lock: LockData, tag: unknown, params: unknown, aftermath: (after: ConversionAftermath) => void): Promise<{ readonly lock: LockData; readonly appliedAt?: number }>;
  /** Extends `lock` to `locktimeout` ms (the positional argument; default the lock's lease); `params` as passed. */
  extend(target: Document, lock: LockData, params: unknown, locktimeout: unknown): Promise<Extension>;
  /**
   * Keeps `lock` for a lease keeper: extends it to `lease` ms, in a batch with the other locks due
   * about then where it can be (a plain extension), else as {@link extend} does. Resolves undefined
   * when it was not sent (`kept.signal` aborted first, or its time ran out while it waited).
   */
  keep?(target: Document, lock: LockData, params: unknown, lease: number | undefined, kept: KeptExtension): Promise<Extension | undefined>;
  guard(target: Document, lock: LockData, extra?: Document): Document;
  /** ms of the lease left by the upper bound of the server's clock. */
  remaining(lock: LockData): number;
  /** The lease `lock` was taken or last extended with, in ms. */
  lease(lock: LockData): number;
  /** The locked collection, `db.collection`. */
  readonly namespace: string;
}

/** The extension an extend's outcome reports (when the server applied it unknown: the earliest possible). */
export function extensionOf(extended: { readonly lock: LockData; readonly appliedAt?: number }): Extension {
  return { expiresAt: extended.lock.expiresAt, appliedAt: extended.appliedAt ?? 0 };
}
