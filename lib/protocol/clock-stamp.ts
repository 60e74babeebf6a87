import type { Document } from 'mongodb';
import type { LockOperation } from './operation';
import type { LockPaths } from './stored-format';

/**
 * Reads the clock of the server that holds the document `target` selects, by writing it: the
 * server's clock into `lock.now` (`$currentDate`, which every acquisition and extension writes
 * too), and nothing else. On a sharded cluster that is the clock of the shard holding the
 * document, which no read shows (a read's `$$NOW` is the routing mongos's).
 */
export function clockStampOperation(paths: LockPaths, target: Document): LockOperation {
  return { filter: target, update: { $currentDate: { [paths.now]: true } } };
}
