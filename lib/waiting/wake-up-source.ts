/**
 * How long a waiter sleeps, at most, while a lock that blocks it is held in this process: that
 * holder's release wakes it, so polling would only add refused attempts (a holder that never
 * releases is noticed this often, and its lease end stops it counting).
 */
export const HELD_HERE_SLEEP = 1_000;

/** A sleep between two attempts: `ms` asked (the retry delay), never past `left` (what is left of the wait). */
export interface Sleep {
  readonly ms: number;
  readonly left: number;
}

/**
 * One way a waiting acquisition learns that it may try again. There are three, and a sleep
 * between attempts ends when the first of them speaks ({@link firstWakeUp}):
 * - a release in this process (a {@link Latch}), which wakes the first waiter it blocked, or
 *   hands it the lock in the release's own write (lib/waiting/local-waiters.ts);
 * - a change another process made, heard on the collection's change stream (another
 *   {@link Latch}, lib/waiting/remote-wake-ups.ts);
 * - its poll ({@link Polling}): the retry delay, when neither spoke.
 * A wake-up is a hint: the waiter tries again, and the server decides.
 */
export interface WakeUpSource {
  /** Calls `wake` once this source ends the sleep (at once if it already did); returns the function that stops listening. */
  listen(sleep: Sleep, wake: () => void): () => void;
}

/** A wake-up that can come while its waiter is awake (between two sleeps): it is kept, and ends the next sleep at once. */
export class Latch implements WakeUpSource {
  private rung = false;
  private listener: (() => void) | undefined;

  /** True while a sleep listens to it. */
  get listening(): boolean {
    return this.listener !== undefined;
  }

  /** Ends the sleep that listens, or the next one. */
  ring(): void {
    if (this.listener) this.listener();
    else this.rung = true;
  }

  /** Forgets a wake-up kept for the next sleep. */
  clear(): void {
    this.rung = false;
  }

  listen(_sleep: Sleep, wake: () => void): () => void {
    if (this.rung) {
      this.rung = false;
      wake();
      return () => undefined;
    }
    this.listener = wake;
    return () => (this.listener = undefined);
  }
}

/** A waiter's poll: its sleep ends after the retry delay, or later while a lock that blocks it is held here ({@link pollDelay}). */
export class Polling implements WakeUpSource {
  constructor(private readonly heldHere: () => boolean) {}

  listen(sleep: Sleep, wake: () => void): () => void {
    const timer = setTimeout(wake, pollDelay(sleep, this.heldHere()));
    return () => clearTimeout(timer);
  }
}

/** How long a poll waits: the retry delay, or up to {@link HELD_HERE_SLEEP} while a lock that blocks the waiter is held here (`heldHere`), never past `left`. */
function pollDelay(sleep: Sleep, heldHere: boolean): number {
  return Math.min(sleep.left, heldHere ? Math.max(sleep.ms, HELD_HERE_SLEEP) : sleep.ms);
}

/** Sleeps until the first of `sources` ends the sleep; rejects with the signal's reason as soon as it aborts. */
export function firstWakeUp(sources: readonly WakeUpSource[], sleep: Sleep, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const stops: Array<() => void> = [];
    let over = false;
    const end = (): void => {
      over = true;
      stops.forEach((stop) => stop());
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = (): void => {
      end();
      reject(signal?.reason);
    };
    const wake = (): void => {
      if (over) return;
      end();
      resolve();
    };
    for (const source of sources) {
      const stop = source.listen(sleep, wake);
      if (over) return stop();
      stops.push(stop);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
