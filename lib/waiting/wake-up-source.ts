import { retryDelay } from './wait-options';

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
 * - its poll ({@link Polling}): the retry delay, when neither spoke; while the change stream is
 *   healthy for the waiter, a safety poll of seconds or the blocking leases' end instead.
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

/**
 * The safety poll of a waiter that relies on a healthy change stream, in ms: it sleeps about this
 * long (±{@link SAFETY_POLL_JITTER}, so that waiters spread out) when nothing wakes it. It bounds
 * what a change the stream lost without breaking (no error, no gap the server reports) costs: the
 * waiter's next attempt comes at most this late. 3 s keeps a waiter at about two commands per
 * safety poll (an attempt and the read that explains its refusal: about 0.7 a second, against
 * about 10 on the polling schedule) while a lost release still costs seconds, not the wait;
 * shorter would spend polling's cost on a rare loss, longer would make that loss a stall.
 */
export const SAFETY_POLL = 3_000;
/** The jitter of {@link SAFETY_POLL}: a fraction of it, either way. */
export const SAFETY_POLL_JITTER = 0.25;
/** How soon after its known expiry a waiter tries, in ms: the leases are judged on the server's clock, bounded from below here. */
const AFTER_EXPIRY = 5;

/** What a waiter's poll knows of the change stream that would tell it of a change (lib/waiting/remote-wake-ups.ts). */
export interface StreamWatch {
  /** True when the stream tells the waiter of every change to its document since its last attempt was sent. */
  covering(): boolean;
  /** Calls `then` once the stream made progress past local time `since` (a read sent after it answered, or a token past the client's cluster time then); returns the function that stops waiting. */
  afterRead(since: number, then: () => void): () => void;
  /** Calls `lost` when the stream stops covering (it broke, or reopened without continuity); returns the function that stops listening. */
  onLoss(lost: () => void): () => void;
  /** In ms, how long until the leases of the entries that refused the waiter end (known from the read that explained a refusal), if known. */
  leaseEndsIn(): number | undefined;
}

/**
 * A waiter's poll: its sleep ends after the retry delay, or later while a lock that blocks it is
 * held here ({@link pollDelay}). With a `stream` that covers the waiter's document, once it has
 * made progress since the sleep began (the server answered after the refusal: StreamWatch.afterRead), the
 * sleep lasts until the blocking leases end if that is known, else a {@link SAFETY_POLL}: a change
 * will wake the waiter. The stream's loss, or {@link shorten}, brings the short schedule back at once.
 */
export class Polling implements WakeUpSource {
  /** Cuts the sleep under way to the short schedule. */
  private cut: (() => void) | undefined;
  /** The next sleep keeps to the short schedule. */
  private shortNext = false;
  /** The last sleep relied on the stream (it was armed long): the attempt that follows should say why it is refused. */
  relied = false;

  constructor(
    private readonly heldHere: () => boolean,
    private readonly stream?: StreamWatch,
  ) {}

  /**
   * The stream heard a change it could not place (an event without `_id`): the sleep under way,
   * or the next one, lasts at most a short poll from now (a jittered MAX_RETRY_DELAY: 75–150 ms),
   * as on the polling schedule. Waking at once would send every waiter of the process together.
   */
  shorten(): void {
    if (this.cut) this.cut();
    else this.shortNext = true;
  }

  listen(sleep: Sleep, wake: () => void): () => void {
    const start = performance.now();
    // Cut short while it was awake (see shorten): this sleep is one short poll at most.
    const short = this.shortNext ? Math.min(pollDelay(sleep, false), retryDelay(Infinity)) : pollDelay(sleep, this.heldHere());
    let due = start + short;
    let timer = setTimeout(wake, short);
    /** Cut short: no later answer of the stream makes this sleep long again. */
    let cut = false;
    const arm = (at: number): void => {
      due = at;
      clearTimeout(timer);
      timer = setTimeout(wake, Math.max(0, at - performance.now()));
    };
    const stops: Array<() => void> = [];
    const stream = this.stream;
    this.relied = false;
    if (stream && !this.shortNext && stream.covering()) {
      stops.push(
        stream.afterRead(start, () => {
          if (cut) return;
          this.relied = true;
          arm(start + longDelay(sleep, stream.leaseEndsIn()));
          stops.push(stream.onLoss(() => arm(Math.min(due, start + short))));
        }),
      );
    }
    this.shortNext = false;
    this.cut = () => {
      cut = true;
      arm(Math.min(due, performance.now() + retryDelay(Infinity)));
    };
    return () => {
      clearTimeout(timer);
      stops.forEach((stop) => stop());
      this.cut = undefined;
    };
  }
}

/** How long a poll waits: the retry delay, or up to {@link HELD_HERE_SLEEP} while a lock that blocks the waiter is held here (`heldHere`), never past `left`. */
function pollDelay(sleep: Sleep, heldHere: boolean): number {
  return Math.min(sleep.left, heldHere ? Math.max(sleep.ms, HELD_HERE_SLEEP) : sleep.ms);
}

/** How long a waiter the stream covers sleeps: a jittered {@link SAFETY_POLL}, or until the blocking leases end (`leaseEndsIn`, ms) if sooner, never past `left`. */
function longDelay(sleep: Sleep, leaseEndsIn: number | undefined): number {
  const safety = SAFETY_POLL * (1 - SAFETY_POLL_JITTER + 2 * SAFETY_POLL_JITTER * Math.random());
  return Math.min(sleep.left, Math.max(sleep.ms, Math.min(safety, leaseEndsIn === undefined ? Infinity : leaseEndsIn + AFTER_EXPIRY)));
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
