import { describe, expectMs, MAX_MS } from '../common/validation';

/** Per-call options for waiting on a held lock. */
export interface WaitOptions {
  /**
   * ms to keep retrying while the lock is held (exponential backoff with jitter, capped), an
   * assertive tag's continuations included. `0` fails fast, as monglock v2. `Infinity` waits until
   * the lock is free or `signal` aborts (in effect 2^31 - 1 ms, about 24.8 days: the longest
   * a Node.js timer sleeps).
   * @default 0
   */
  readonly wait?: number;
  /**
   * Cancels a waiting acquisition: it rejects promptly with `signal.reason`, and a lock that an
   * attempt in flight writes afterwards is released.
   */
  readonly signal?: AbortSignal;
  /** Wait first come, first served (see the lock's `fair` option). @default the lock's `fair` */
  readonly fair?: boolean;
}

/** How long an acquisition may wait for a held lock, and what can cancel it (resolved). */
export interface WaitParams {
  /** ms to keep retrying; 0 fails fast, as monglock v2 did. */
  readonly wait: number;
  readonly signal: AbortSignal | undefined;
}

/** First retry delay, in ms; it doubles per attempt up to {@link MAX_RETRY_DELAY}. */
export const MIN_RETRY_DELAY = 4;
/** Largest retry delay, in ms. */
export const MAX_RETRY_DELAY = 150;

/** Reads `params.wait` (ms, default 0; `Infinity`: {@link MAX_MS}) and `params.signal` (an AbortSignal). */
export function readWaitParams(params: Record<string, unknown>): WaitParams {
  const wait = params.wait === undefined ? 0 : params.wait === Infinity ? MAX_MS : expectMs('params.wait', params.wait, 0);
  const signal = params.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(`Expected \`params.signal\` to be an AbortSignal, got ${describe(signal)}`);
  }
  if (params.fair !== undefined && typeof params.fair !== 'boolean') throw new TypeError(`Expected \`params.fair\` to be true or false, got ${describe(params.fair)}`);
  return { wait, signal };
}

/**
 * The delay before retry number `attempt` (1-based): exponential, capped, with "equal jitter"
 * (half fixed, half random) so that waiters spread out without ever retrying at once.
 */
export function retryDelay(attempt: number): number {
  const ceiling = Math.min(MAX_RETRY_DELAY, MIN_RETRY_DELAY * 2 ** Math.min(attempt - 1, 16));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Calls `attempt` until it resolves, an error is not `retryable`, the signal aborts, or `wait`
 * ms have passed by the local clock `now` (then the last retryable error is thrown). Sleeps
 * {@link retryDelay} between attempts, never past the deadline.
 */
export async function retryWithin<T>(
  params: WaitParams,
  attempt: () => Promise<T>,
  retryable: (error: unknown) => boolean,
  now: () => number,
  sleep: (ms: number, signal: AbortSignal | undefined, left: number) => Promise<void> = delay,
): Promise<T> {
  // Elapsed time is summed from forward steps only: a clock set back does not stretch the wait.
  let last = now();
  let elapsed = 0;
  const realStart = performance.now();
  const elapse = (): number => {
    const current = now();
    elapsed += Math.max(0, current - last);
    last = current;
    return elapsed;
  };
  for (let count = 1; ; count++) {
    try {
      return await attempt();
    } catch (error) {
      const left = params.wait - elapse();
      if (!retryable(error) || left <= 0) throw error;
      // `left` is on the clock `now`, a sleep on the real one: a clock that runs faster (as measured
      // over the wait so far) shrinks what a sleep may take of it, so a long sleep ends by its wait.
      const real = performance.now() - realStart;
      const sleepLeft = elapsed > 0 && real < elapsed ? Math.max(1, left * (real / elapsed)) : left;
      await sleep(Math.min(sleepLeft, retryDelay(count)), params.signal, sleepLeft);
    }
  }
}

/**
 * A signal that aborts, with the first reason, as soon as any of `signals` does (undefined when
 * none is given); `dispose()` detaches it from them once the call is over.
 */
export function linkSignals(...signals: Array<AbortSignal | undefined>): { signal: AbortSignal | undefined; dispose(): void } {
  const given = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  if (given.length <= 1) return { signal: given[0], dispose: () => undefined };
  const controller = new AbortController();
  const detach = (): void => given.forEach((signal) => signal.removeEventListener('abort', onAbort));
  function onAbort(this: AbortSignal): void {
    detach();
    controller.abort(this.reason);
  }
  const already = given.find((signal) => signal.aborted);
  if (already) controller.abort(already.reason);
  else given.forEach((signal) => signal.addEventListener('abort', onAbort, { once: true }));
  return { signal: controller.signal, dispose: detach };
}
