import { backgroundPause, currentOrigin, inBackground } from '../common/background';
import { untilServerPassed } from '../engine/commit-outcome';
import { isLockError } from '../common/errors';
import { lockWrittenBy, type Acquired } from '../engine/acquired';
import type { ServerClock } from '../protocol/server-clock';

/** How often a release of a lock whose reply was lost is tried when MongoDB fails, and how long apart (ms). */
const LATE_RELEASE_RETRIES = [1_000, 3_000];
/** The first pause between releases of a lock whose write may still land late, in ms (doubling up to when it can no longer land). */
const LATE_LANDING_PAUSE = 250;

/**
 * The bookkeeping of one acquisition call, which may take several attempts (waiting, assertive
 * continuations) and may be abandoned: its signal aborts, its `wait` runs out, a promise library
 * cancels it, or it fails. Every lock an attempt writes that the caller will not receive is
 * released, including one written by an attempt still in flight when the call was abandoned,
 * whose reply arrives later, and one whose reply was lost (whose write may even land later).
 * So giving up never leaves a lock held while MongoDB can be reached.
 */
export class Acquisition {
  #abandoned: { readonly reason: unknown } | undefined;
  /** Who started the call (a hapi server, lib/common/background.ts): its background work is that origin's. */
  readonly #origin = currentOrigin();

  /**
   * @param release releases a lock this call wrote; rejects when it could not.
   * @param clock the bounds on the server's clock, to know when a lost write can no longer land.
   * @param readClock reads the server's clock (from any document), when the bounds are not known yet.
   */
  constructor(
    private readonly release: (lock: Acquired) => Promise<void>,
    private readonly clock: ServerClock,
    private readonly readClock: () => Promise<void>,
  ) {}

  /** True once the call was abandoned. */
  get abandoned(): boolean {
    return this.#abandoned !== undefined;
  }

  /**
   * Runs one attempt. `wrote` names the lock its outcome holds that this call wrote (undefined
   * for none, or for a lock the caller already owned). If the call was abandoned by the time the
   * attempt settles, that lock is released and the attempt rejects with the abandonment's reason.
   * A lock a failed attempt may have written is released in any case: the caller does not hold it.
   */
  async attempt<T>(run: () => Promise<T>, wrote: (outcome: T) => Acquired | undefined): Promise<T> {
    let outcome: T;
    try {
      outcome = await run();
    } catch (error) {
      const maybe = lockWrittenBy(error);
      if (maybe !== undefined) void inBackground(this.releaseOnceLanded(maybe), this.#origin);
      throw error;
    }
    if (this.#abandoned) {
      const lock = wrote(outcome);
      if (lock !== undefined) await this.releaseQuietly(lock);
      throw this.#abandoned.reason;
    }
    return outcome;
  }

  /** Abandons the call with `reason`: releases `locks` now, and whatever attempts in flight write when they settle. */
  async abandon(reason: unknown, ...locks: Array<Acquired | undefined>): Promise<void> {
    this.#abandoned ??= { reason };
    await Promise.all(locks.map((lock) => (lock === undefined ? undefined : this.releaseQuietly(lock))));
  }

  /**
   * Settles with `pending` (an attempt), or rejects as soon as `signal` aborts. The abort abandons
   * the call at once (synchronously, so that an attempt settling in the same turn sees it), and an
   * outcome that arrives after it is released: `wrote` names its lock.
   */
  race<T>(pending: Promise<T>, signal: AbortSignal | undefined, wrote: (outcome: T) => Acquired | undefined): Promise<T> {
    if (!signal) return pending;
    return new Promise<T>((resolve, reject) => {
      let lost = false;
      const onAbort = (): void => {
        lost = true;
        this.#abandoned ??= { reason: signal.reason };
        void inBackground(tail, this.#origin); // the attempt goes on: its lock is released when it comes back
        reject(signal.reason);
      };
      const tail = pending.then(
        async (outcome) => {
          signal.removeEventListener('abort', onAbort);
          if (!lost) return resolve(outcome);
          const lock = wrote(outcome);
          if (lock !== undefined) await this.releaseQuietly(lock);
        },
        (error: unknown) => {
          signal.removeEventListener('abort', onAbort);
          if (!lost) reject(error);
        },
      );
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private async releaseQuietly(lock: Acquired): Promise<void> {
    await this.release(lock).catch(() => undefined);
  }

  /**
   * Releases a lock whose reply was lost. Its request may still be on its way, and a release that
   * overtook it would match nothing; but the server refuses its stamp once its clock passes
   * `startsBy`, so the release waits until the lower bound of the server's clock is past that
   * (reading the server's clock first if this client has not yet). A command blocked on the server
   * may still land until `landsBy` (its `maxTimeMS` later): while the lock is not found, it is
   * released again, at doubling pauses, until then, or until its lease has ended by itself.
   */
  private async releaseOnceLanded(lock: Acquired): Promise<void> {
    const passed = (ms: number | undefined): Promise<void> =>
      ms === undefined ? Promise.resolve() : untilServerPassed({ clock: this.clock, readClock: this.readClock }, ms, backgroundPause); // reads the server's clock first, before any reply
    try {
      await passed(lock.startsBy ?? lock.landsBy);
      for (let pause = LATE_LANDING_PAUSE; ; pause *= 2) {
        if (await this.releaseRetrying(lock)) return;
        const left = lock.landsBy === undefined ? 0 : this.clock.untilPast(Math.min(lock.landsBy, lock.lock.expiresAt));
        if (left <= 0) return;
        await backgroundPause(Math.min(pause, left));
      }
    } catch {
      // MongoDB could not be reached to read its clock: the lease, if any, ends the lock.
    }
  }

  /** Releases `lock`: false when it was not there (it may land later); true when it was released, or when MongoDB failed every try (nothing more to do). */
  private async releaseRetrying(lock: Acquired): Promise<boolean> {
    for (const retryAfter of [...LATE_RELEASE_RETRIES, undefined]) {
      try {
        await this.release(lock);
        return true;
      } catch (error) {
        if (!isLockError(error, 'DbError')) return false;
        if (retryAfter === undefined) return true; // gave up: nothing more to try
        await backgroundPause(retryAfter);
      }
    }
    return false;
  }
}

