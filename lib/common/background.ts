import { AsyncLocalStorage } from 'node:async_hooks';

/** Work monglock goes on with after a call settled, until it settles too, with who started that call (see {@link withOrigin}). */
const pending = new Map<Promise<unknown>, object | undefined>();
const origins = new AsyncLocalStorage<object>();

/** Runs `run` with `origin` (a hapi server) as the origin of the calls it starts: their background work can be awaited apart ({@link backgroundSettled}). */
export function withOrigin<T>(origin: object, run: () => T): T {
  return origins.run(origin, run);
}

/** The origin of the call running now ({@link withOrigin}), if any. */
export function currentOrigin(): object | undefined {
  return origins.getStore();
}

/**
 * Tracks `work` that goes on after its call settled (releasing a lock that an abandoned or failed
 * acquisition wrote, once its reply comes or its write can no longer land), for
 * {@link backgroundSettled}, as `origin`'s; returns it.
 */
export function inBackground<T>(work: Promise<T>, origin = currentOrigin()): Promise<T> {
  pending.set(work, origin);
  work.then(
    () => pending.delete(work),
    () => pending.delete(work),
  );
  return work;
}

/**
 * Resolves once the background work of this process started so far (of `origin`'s calls only,
 * when given), and any it starts meanwhile, has settled: after it, no lock monglock wrote on its
 * own is left to release (what a server's shutdown awaits before its client closes). Bounded by
 * the calls' `timeout`s.
 */
export async function backgroundSettled(origin?: object): Promise<void> {
  const awaited = (): Array<Promise<unknown>> => [...pending].filter(([, of]) => origin === undefined || of === origin).map(([work]) => work);
  if (awaited().length === 0) return;
  // Awaited: the process stays up for the background work, whose own pauses do not hold it ({@link backgroundPause}).
  const keepAlive = setInterval(() => undefined, 60_000);
  try {
    for (let works = awaited(); works.length > 0; works = awaited()) await Promise.allSettled(works);
  } finally {
    clearInterval(keepAlive);
  }
}

/**
 * Resolves after `ms`, on a timer that does not keep the process alive: a pause of background
 * work, which no caller awaits (a process whose own work is done exits, and a lock left behind
 * ends with its lease), unless {@link backgroundSettled} is awaited.
 */
export function backgroundPause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
