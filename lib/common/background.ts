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
  while (pending.size > 0) await Promise.allSettled([...pending]);
}
