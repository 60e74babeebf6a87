import type { ClaimedLock, LockData } from '../protocol/lock-data';
import type { Document, WithId } from 'mongodb';
import { isLockError } from '../common/errors';
import type { Unclaimed } from '../common/promise-library';
import type { PromiseOf } from '../common/promise-types';
import type { ConversionAftermath, ConvertParams } from './conversion';
import { FollowedLock } from './followed-lock';
import { markQuarantined } from './ended-holds';
import type { QuarantineParams } from './quarantine';

export type { LockData } from '../protocol/lock-data';
export { extensionOf, HANDLE_PARAMS, type Extension, type HandleOwner, type HandleParams, type KeptExtension } from './handle-owner';
import type { Extension, HandleOwner, HandleParams, KeptExtension } from './handle-owner';

/** The locked document as a collection of `TSchema` stores it: `WithId<TSchema>`, or any document for an untyped collection. */
export type SchemaDocument<TSchema extends Document> = Document extends TSchema ? Document : WithId<TSchema>;

/**
 * A held lock. It addresses the document it locked by its `_id`, whatever the document becomes
 * (a field the acquisition filter named may change while it is held). Survives
 * `JSON.stringify`/`JSON.parse` as {@link LockData}: the parsed object can still be passed to
 * `release(filter, { lock })` (for example in a later HTTP request). Used where a number is
 * expected, it is its `timestamp`, as monglock v2's writeLock token was.
 *
 * `TSchema` is the locked collection's schema (updates are typed by it), `P` the lock's `Promise`
 * option (its promises are returned), `TDocument` what `document` holds: the document the
 * acquisition returned, as its `document` option shaped it (`never`, so `undefined`, without it;
 * `unknown` by default, so that a plain `LockHandle` accepts every handle). An acquisition that
 * asked for the document always has it: `handle.document.balance` needs no `!`.
 */
export interface LockHandle<TSchema extends Document = Document, P = undefined, TDocument = unknown> extends LockData {
  /** When the lease ends, ms since the epoch by the server's clock (later after an extension). */
  readonly expiresAt: number;
  /** The locked collection, `db.collection` (for logs and events; not part of the JSON). */
  readonly namespace: string;
  /**
   * The locked document as the acquisition left it (without the lock field), when `document` was
   * asked for; undefined otherwise (so typed: {@link DocumentField}).
   */
  readonly document: DocumentField<TDocument>;
  /**
   * ms of the lease this client can rely on: until `expiresAt` by the upper bound of the server's
   * clock, so the server's clock has not reached the lease's end either (0 once it may have).
   */
  remaining(): number;
  /**
   * Releases this lock. Same outcomes as `release(filter, { lock })`, except for a lock whose reply
   * was lost (`err.lock`), which is released if it is held and otherwise left alone (but a release
   * with an update never resolves unless the update landed). With `params.update`, that update is
   * applied by the same atomic write, only if the lock is still held (else
   * `LockNotFound`/`LockWasReacquired`, and nothing is written); `match` and `arrayFilters` say how
   * it applies, `session` joins the caller's transaction (see `UpdateParams`).
   */
  release(params?: HandleParams<TSchema>): PromiseOf<P, void>;
  /**
   * Ends this hold in one write that leaves a quarantine mark (`reason`, the server's time, this
   * lock's id; until `until` or `clearQuarantine`): every acquisition of the document is then refused
   * with `Quarantined` (409). `update` is applied by the same write, as a commit's. Only a lock that
   * holds its document alone (a writeLock, a multiLock tag cooperative with itself, not an owner's);
   * else a TypeError, before anything is written.
   */
  quarantine(params: QuarantineParams<TSchema>): PromiseOf<P, void>;
  /**
   * Pushes the lease forward to `locktimeout` ms (default: the tag's lease) from the server's now.
   * Fails with `LockNotFound`/`LockWasReacquired` if the lock was lost; never re-creates it.
   */
  extend(locktimeout?: number, params?: HandleParams<TSchema>): PromiseOf<P, this>;
  /**
   * multiLock: turns this lock into a lock of another `tag` in one atomic update (upgrade, for
   * example read → write, or downgrade): at no instant is the document free of it. Resolves this
   * handle, with its new `tag`, `fence` (a new token) and lease. Refused while other locks the new
   * tag waits for are held (`CooperativeLock`); with `wait`, it waits with writer preference (new
   * locks of those tags are refused meanwhile). Two upgrades waiting for each other cannot be:
   * the second is refused at once (`UpgradeConflict`).
   */
  convert(tag: string, params?: ConvertParams): PromiseOf<P, this>;
  /**
   * A filter that matches the locked document only while this lock is held and unexpired by the
   * server's clock, combined with `extra`: `collection.updateOne(handle.guard(), update)` from a
   * holder whose lease ran out matches nothing.
   */
  guard(extra?: Document): Document;
  /** The plain data, for JSON. */
  toJSON(): LockData;
  /** The timestamp, so that v2 code treating the token as a number keeps working. */
  valueOf(): number;
}

/** What `handle.document` holds for a handle whose acquisition returned `TDocument`: `undefined` when it asked for none (`never`). */
export type DocumentField<TDocument> = [TDocument] extends [never] ? undefined : TDocument;

/** The class behind every {@link LockHandle}: made by the locks of this package, never by callers. */
export class Handle implements LockHandle<Document, unknown, Document | undefined> {
  /** The lock as its conversions and extensions change it. */
  readonly #lock: FollowedLock;
  readonly #owner: HandleOwner;
  readonly #target: Document;
  readonly #watchers = new Set<() => void>();
  readonly #unconfirmed: boolean;
  /** For a lock whose reply was lost: the server time after which its write can no longer land. */
  readonly #landsBy: number | undefined;
  #lapsed = false;
  /**
   * The locked document as the acquisition left it (without the lock field), when `document` was
   * asked for; undefined otherwise.
   */
  readonly document: Document | undefined;

  /**
   * @param target the locked document's address (for a lock whose reply was lost, what the filter says of its shard key: its id finds it)
   * @param more `unconfirmed`: a lock whose reply was lost (`err.lock`): maybe never written or already released, so releasing it
   *   succeeds when it is not held; `landsBy`: for such a lock, when its write can no longer land; `document`: the locked document
   */
  constructor(data: LockData, owner: HandleOwner, target: Document, more: { unconfirmed?: boolean; landsBy?: number; document?: Document } = {}) {
    this.#lock = new FollowedLock(data, () => this.#watchers.forEach((watcher) => watcher()));
    this.#owner = owner;
    this.#target = target;
    this.#unconfirmed = more.unconfirmed ?? false;
    this.#landsBy = more.landsBy;
    this.document = more.document;
  }

  /** The locked collection, `db.collection` (for logs and events; not part of the JSON). */
  get namespace(): string {
    return this.#owner.namespace;
  }

  /** 128 random bits, hex: the proof of ownership. */
  get id(): string {
    return this.#lock.lock.id;
  }

  /** The lock's tag (`write` for a writeLock); a conversion changes it. */
  get tag(): string {
    return this.#lock.lock.tag;
  }

  /** Acquisition (or conversion) time, ms since the epoch by the server's clock. */
  get timestamp(): number {
    return this.#lock.lock.timestamp;
  }

  /** Fencing token: strictly increases per document over all acquisitions (and conversions). */
  get fence(): number {
    return this.#lock.lock.fence;
  }

  /** The permits it holds, for a tag with a limit (a semaphore); absent otherwise. */
  get permits(): number | undefined {
    return this.#lock.lock.permits;
  }

  /** When its minimum hold ends (a lock taken with `minHold`), ms since the epoch by the server's clock; absent otherwise. */
  get minHoldUntil(): number | undefined {
    return this.#lock.lock.minHoldUntil;
  }

  /** The owner whose hold it is (reentrant acquisitions); absent otherwise. */
  get owner(): string | undefined {
    return this.#lock.lock.owner;
  }

  /** When the lease ends, ms since the epoch by the server's clock. */
  get expiresAt(): number {
    return this.#lock.expiresAt;
  }

  /**
   * Records a new lease end for `handle` from an extension applied by the server at `appliedAt`
   * (its own, the explicit `extend(filter, { lock })`, a resource group's `renew`) and tells its
   * watchers. Replies can arrive out of order: the server keeps the last write it applied, so a
   * reply to an earlier write is ignored, and of two writes in one ms the shorter lease is kept.
   * @internal
   */
  static updateExpiry(handle: Handle, extension: Extension): void {
    handle.#lock.extended(extension);
  }

  /**
   * The lock `handle` holds, as data, with when its acquisition can no longer land (`landsBy`: 0
   * for a confirmed lock), which a commit settled after a lost reply waits for.
   * @internal
   */
  static claim(handle: Handle): ClaimedLock {
    return { ...handle.toJSON(), landsBy: handle.#unconfirmed ? handle.#landsBy : 0, ...(handle.#lapsed && { lapsed: true }) };
  }

  /** Its lease keeper stopped relying on `handle` (no extension came in time): its release is sent as a cleanup. @internal */
  static lapse(handle: Handle): void {
    handle.#lapsed = true;
  }

  /** The lease `handle` was taken or last extended with, in ms. @internal */
  static lease(handle: Handle): number {
    return handle.#owner.lease(handle.toJSON());
  }

  /**
   * Calls `watcher` whenever `handle`'s lease end changes (the lease keeper replans); returns the
   * function that stops watching.
   * @internal
   */
  static watchExpiry(handle: Handle, watcher: () => void): () => void {
    handle.#watchers.add(watcher);
    return () => handle.#watchers.delete(watcher);
  }

  /** ms of the lease this client can rely on (see {@link LockHandle.remaining}). */
  remaining(): number {
    return Math.max(0, this.#owner.remaining(this.toJSON()));
  }

  /** Releases this lock (see {@link LockHandle.release}); `group` (internal): the `commitAll` it is part of. */
  release(params?: HandleParams, group?: string): Promise<void> {
    const released = this.#lock.following(() => this.#owner.release(this.#target, Handle.claim(this), params, group));
    // A lock whose reply was lost may never have been written: not finding it is no failure,
    // unless the release carries an update, which must never be reported applied when it was not.
    if (!this.#unconfirmed || (params as { update?: unknown } | undefined)?.update !== undefined) return released;
    return released.then(undefined, (error: unknown) => {
      if (isLockError(error, 'LockNotFound') || isLockError(error, 'LockWasReacquired')) return;
      throw error;
    });
  }

  /** Ends this hold with a quarantine mark (see {@link LockHandle.quarantine}). */
  quarantine(params: QuarantineParams): Promise<void> {
    const quarantine = this.#owner.quarantine?.bind(this.#owner);
    if (!quarantine) return Promise.reject(new TypeError('Only a writeLock or multiLock lock is quarantined'));
    return this.#lock.following(() => quarantine(this.#target, Handle.claim(this), params)).then(() => markQuarantined(this));
  }

  /** Pushes the lease forward (see {@link LockHandle.extend}). */
  extend(locktimeout?: number, params?: HandleParams): Promise<this> {
    return Handle.keep(this, () => locktimeout, params);
  }

  /**
   * Extends `handle` to `lease()` ms, asked when it is sent: again after it follows a conversion (a
   * lease keeper's: the lease under its new tag). With `kept` (a lease keeper's), in a batch where
   * the lock allows it; then it may not be sent at all (see {@link HandleOwner.keep}). @internal
   */
  static keep<H extends Handle>(handle: H, lease: () => number | undefined, params?: HandleParams, kept?: KeptExtension): Promise<H> {
    const owner = handle.#owner;
    const send = (): Promise<Extension | undefined> =>
      kept && owner.keep ? owner.keep(handle.#target, handle.toJSON(), params, lease(), kept) : owner.extend(handle.#target, handle.toJSON(), params, lease());
    return handle.#lock.following(send).then((extension) => {
      if (extension) Handle.updateExpiry(handle, extension);
      return handle;
    });
  }

  /** Converts this lock to another tag (see {@link LockHandle.convert}); resolves this handle, changed. Until what its attempts left is known, a refused release or extension waits. */
  convert(tag: string, params?: ConvertParams): Promise<this> {
    if (!this.#owner.convert) return Promise.reject(new TypeError('Only a multiLock lock converts to another tag'));
    if (this.minHoldUntil !== undefined) return Promise.reject(new TypeError('A lock taken with `minHold` does not convert: its minimum hold is kept by its entry, which a conversion replaces'));
    const lock = this.#lock;
    let later: Promise<unknown> = Promise.resolve();
    const aftermath = ({ now, later: settling }: ConversionAftermath): void => {
      if (now) lock.follow(now);
      later = settling.then((change) => change && lock.follow(change), () => undefined);
    };
    const converting = this.#owner.convert(this.#target, Handle.claim(this), tag, params, aftermath).then((converted) => (lock.follow(converted), this));
    const settled = converting.then(undefined, () => later);
    lock.converting = settled;
    void settled.then(() => lock.converting === settled && (lock.converting = undefined));
    return converting;
  }

  /**
   * A filter that matches the locked document only while this lock is held and unexpired by the
   * server's clock, combined with `extra`: `collection.updateOne(handle.guard(), update)` from a
   * holder whose lease ran out matches nothing.
   */
  guard(extra?: Document): Document {
    return this.#owner.guard(this.#target, this.toJSON(), extra);
  }

  /** The plain data, for JSON. */
  toJSON(): LockData {
    return { ...this.#lock.lock, expiresAt: this.#lock.expiresAt };
  }

  /** The timestamp, so that v2 code treating the token as a number keeps working. */
  valueOf(): number {
    return this.timestamp;
  }
}

/** Releases the lock an acquisition's unseen outcome carries (its caller cancelled): the handle it won, or one its error hands over. */
export function releaseUnclaimed(outcome: Unclaimed): void {
  const lock = 'value' in outcome ? outcome.value : (outcome.error as { lock?: unknown } | undefined)?.lock;
  if (lock instanceof Handle) void lock.release().catch(() => undefined);
}

/** `value instanceof LockHandle` is true for the handles of this package's locks (handles are never made by callers). */
export const LockHandle: {
  readonly prototype: LockHandle<Document, unknown, unknown>;
  [Symbol.hasInstance](value: unknown): value is LockHandle<Document, unknown, unknown>;
} = Handle as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])
