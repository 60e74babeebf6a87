import { isLockError } from '../common/errors';
import type { LockData } from '../protocol/lock-data';
import type { ConversionChange, MaybeConverted } from './conversion-run';
import type { Extension } from './handle-owner';

/**
 * What a handle knows of its lock as its conversions and extensions change it: its tag, token and
 * lease, and, while a conversion whose reply was lost may have landed, what it would have made of
 * it (`maybe`; its tag is the JSON's `maybeTag`). Until that is settled, the lease is the earlier
 * of the two: it is never overstated.
 */
export class FollowedLock {
  #lock: Omit<LockData, 'expiresAt'>;
  #expiresAt: number;
  /** The server's clock when the write that set `#expiresAt` was applied (0: the acquisition). */
  #appliedAt = 0;
  /** Bumped whenever the lock takes another tag or token: a call refused meanwhile is sent again. */
  #generation = 0;
  #maybe: MaybeConverted | undefined;
  /** A conversion in flight: a release or extension refused meanwhile waits for it, and retries as it leaves the lock. */
  converting: Promise<unknown> | undefined;

  /** @param changed called whenever the lease's end may have changed */
  constructor(
    data: LockData,
    private readonly changed: () => void,
  ) {
    this.#lock = lockOnly(data);
    this.#expiresAt = data.expiresAt;
  }

  /** The lock but its expiry. */
  get lock(): Omit<LockData, 'expiresAt'> {
    return this.#lock;
  }

  /** When the lease ends, ms since the epoch by the server's clock: the earlier of the two while a lost conversion may have landed. */
  get expiresAt(): number {
    return Math.min(this.#expiresAt, this.#maybe?.expiresAt ?? Infinity);
  }

  /**
   * Records a new lease end from an extension applied by the server at `appliedAt`. Replies can
   * arrive out of order: a reply to an earlier write is ignored, and of two writes in one ms the
   * shorter lease is kept. An extension under the lock's tag applied after a lost conversion can
   * no longer land settles it: it did not.
   */
  extended(extension: Extension): void {
    if (extension.appliedAt < this.#appliedAt) return;
    const expiresAt = extension.appliedAt === this.#appliedAt ? Math.min(extension.expiresAt, this.#expiresAt) : extension.expiresAt;
    this.#appliedAt = extension.appliedAt;
    this.#expiresAt = expiresAt;
    if (this.#maybe && extension.appliedAt > this.#maybe.landsBy) this.#settleMaybe(undefined);
    this.changed();
  }

  /** Takes what a conversion made of the lock: its new tag, token and lease (applied after any extension of the old tag, which can no longer land), and what a lost write may have made of it. */
  follow(change: ConversionChange): void {
    if ('lock' in change) {
      this.#lock = lockOnly(change.lock);
      this.#maybe = undefined;
      this.#generation++;
      this.extended({ expiresAt: change.lock.expiresAt, appliedAt: change.appliedAt ?? 0 });
    }
    if (change.maybe) {
      this.#settleMaybe(change.maybe);
      this.changed();
    }
  }

  /**
   * Runs `call` (a release, commit or extension, reading the lock when it is sent); refused as not
   * held after a conversion changed the lock meanwhile (waited for if in flight), runs it again;
   * refused while a conversion whose reply was lost may have moved the lock, runs it as that
   * conversion left it (tag, stamp and lease), and keeps that if it lands there.
   */
  following<T>(call: () => Promise<T>): Promise<T> {
    const sent = this.#generation;
    // `then` on the call's own promise, not an async function: the caller's promise library (`Promise` option) is kept.
    return call().then(undefined, async (error: unknown) => {
      if (!(isLockError(error, 'LockNotFound') || isLockError(error, 'LockWasReacquired'))) throw error;
      await this.converting?.catch(() => undefined);
      if (this.#generation !== sent) return call();
      const { maybeTag } = this.#lock;
      if (maybeTag === undefined) throw error;
      const before = { lock: this.#lock, expiresAt: this.#expiresAt, maybe: this.#maybe };
      const maybe = this.#maybe;
      this.#lock = lockOnly({ ...this.#lock, tag: maybeTag, expiresAt: 0, maybeTag: undefined, ...(maybe && { timestamp: maybe.timestamp }) });
      if (maybe) this.#expiresAt = maybe.expiresAt;
      this.#maybe = undefined;
      this.#generation++;
      return call().catch((again: unknown) => {
        if (this.#lock.tag !== maybeTag) throw again;
        ({ lock: this.#lock, expiresAt: this.#expiresAt, maybe: this.#maybe } = before);
        throw error;
      });
    });
  }

  /** Records (or, with undefined, forgets) what a lost conversion may have made of the lock. */
  #settleMaybe(maybe: MaybeConverted | undefined): void {
    this.#maybe = maybe;
    this.#lock = lockOnly({ ...this.#lock, expiresAt: 0, maybeTag: maybe?.tag });
  }
}

/** The fields of `data` a handle keeps (its expiry aside), and only those: its JSON has no others. */
export function lockOnly({ id, tag, timestamp, fence, permits, owner, maybeTag, minHoldUntil }: LockData): Omit<LockData, 'expiresAt'> {
  return { id, tag, timestamp, fence, ...(permits !== undefined && { permits }), ...(owner !== undefined && { owner }), ...(maybeTag !== undefined && { maybeTag }), ...(minHoldUntil !== undefined && { minHoldUntil }) };
}
