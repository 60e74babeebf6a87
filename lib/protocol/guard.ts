import type { Document } from 'mongodb';
import { allOf, entryLiveOnServer, type LockPaths } from './stored-format';

/**
 * A guarded write's filter: `target` (the locked document's `{ _id }`), and only while the lock
 * `id` of `tag` is in it and unexpired by the server's clock (`$$NOW`), checked by the same update
 * as the caller's write. A holder whose lease ended, or whose lock was taken over, matches nothing.
 */
export function guardFilter(paths: LockPaths, target: Document, tag: string, id: string, extra?: Document): Document {
  return allOf(target, [{ $expr: entryLiveOnServer(paths, tag, { id }) }, ...(extra ? [extra] : [])]);
}
