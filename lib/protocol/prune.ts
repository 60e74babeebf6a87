import type { Document } from 'mongodb';
import type { LockOperation } from './operation';
import { pruneTags, type LockPaths } from './stored-format';

/**
 * Prune a shared tag: removes its entries that expired at or before `at`, a time the server has
 * passed. A shared tag's array cannot be pruned by the update that pushes onto it (MongoDB refuses
 * two operators on one path), so an acquisition whose reply shows expired entries there sends this.
 * It removes only expired entries: it can never free a live lock, nor admit a holder.
 */
export function pruneTagOperation(paths: LockPaths, target: Document, tag: string, at: Date): LockOperation {
  return { filter: target, update: { $pull: pruneTags(paths, [tag], at) } };
}
