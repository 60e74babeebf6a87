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

/** Runs `purge` every `intervalMs` (one at a time); `stop()` ends it and waits for a run in flight. */
export function repeatPurge(purge: () => Promise<unknown>, intervalMs: number, report: (error: unknown) => void): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    running = running.then(purge).catch(report);
  }, intervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}
