import type { ResolvedCallOptions } from '../common/options';
import type { ResourceStore } from './resource-store';
import { emptyResourcesFilter, pruneExpiredOperation } from '../protocol/resource-document';
import type { LockPaths } from '../protocol/stored-format';

/** What one purge did. */
export interface PurgeOutcome {
  readonly documentsPruned: number;
  readonly documentsDeleted: number;
}

/**
 * Removes the locks that expired by `serverNow` (a time the server's clock has reached, read from
 * the server), then deletes resource documents that hold no unexpired lock. A document deleted
 * here is re-created, with a later birth time, on its next use, so fencing tokens keep increasing.
 * Neither step can touch a lock that is live by the server's clock.
 */
export async function purgeExpired(store: ResourceStore, paths: LockPaths, serverNow: Date, call: ResolvedCallOptions): Promise<PurgeOutcome> {
  const documentsPruned = await store.updateMany(pruneExpiredOperation(paths, serverNow), call);
  const documentsDeleted = await store.deleteMany(emptyResourcesFilter(paths, serverNow), call);
  return { documentsPruned, documentsDeleted };
}

/**
 * Runs `purge` every `intervalMs`, one run at a time: a tick that finds a run in flight is skipped
 * (a purge slower than the interval never builds a backlog). `stop()` starts no further run and
 * resolves once the run in flight, if any, has ended.
 */
export function repeatPurge(purge: () => Promise<unknown>, intervalMs: number, report: (error: unknown) => void): { stop(): Promise<void> } {
  let inFlight: Promise<void> | undefined;
  let stopped = false;
  const run = async (): Promise<void> => {
    try {
      await purge();
    } catch (error) {
      reportSafely(report, error);
    } finally {
      inFlight = undefined;
    }
  };
  const timer = setInterval(() => {
    if (!stopped && inFlight === undefined) inFlight = run();
  }, intervalMs);
  timer.unref();
  return {
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await inFlight;
    },
  };
}

/** Tells `report` of a failed run; an error `report` itself throws is dropped, never left to crash the process as an unhandled rejection. */
function reportSafely(report: (error: unknown) => void, error: unknown): void {
  try {
    report(error);
  } catch {
    // the caller's handler failed: nobody is left to tell
  }
}
