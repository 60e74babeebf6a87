/** Work monglock goes on with after a call settled, until it settles too. */
const pending = new Set<Promise<unknown>>();

/**
 * Tracks `work` that goes on after its call settled (releasing a lock that an abandoned or failed
 * acquisition wrote, once its reply comes or its write can no longer land), for
 * {@link backgroundSettled}; returns it.
 */
export function inBackground<T>(work: Promise<T>): Promise<T> {
  pending.add(work);
  work.then(
    () => pending.delete(work),
    () => pending.delete(work),
  );
  return work;
}

/**
 * Resolves once the background work of this process started so far, and any it starts
 * meanwhile, has settled: after it, no lock monglock wrote on its own is left to release (what a
 * server's shutdown awaits before its client closes). Bounded by the calls' `timeout`s.
 */
export async function backgroundSettled(): Promise<void> {
  if (pending.size === 0) return;
  // Awaited: the process stays up for the background work, whose own pauses do not hold it ({@link backgroundPause}).
  const keepAlive = setInterval(() => undefined, 60_000);
  try {
    while (pending.size > 0) await Promise.allSettled([...pending]);
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
