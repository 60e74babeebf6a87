import type { Document } from 'mongodb';
import { withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { LockData } from '../protocol/lock-data';
import type { LockPaths, StoredLock } from '../protocol/stored-format';
import type { Store } from './store';

/**
 * A lock passed back as plain data without `minHoldUntil` (`holdUnknown`): whether it was taken
 * with `minHold` is its stored entry's to say, never the caller's data (a caller's own
 * serialization may leave the field out). Reads the entry (under its tag, or the tag a conversion
 * may have moved it to) and returns the lock with the stored end of its minimum hold, if any. The
 * end is written once, with the entry, and never changes while the entry has the lock's id, so a
 * release or an extension judged by it afterwards is judged as by the handle. Locks whose data
 * knows (a handle, its JSON) are returned as they are, with no read.
 */
export async function withStoredHold(store: Store, paths: LockPaths, target: Document, lock: LockData, call: ResolvedCallOptions): Promise<LockData> {
  if (!lock.holdUnknown) return lock;
  const known: LockData = { ...lock, holdUnknown: undefined };
  const seen = await withDbErrors(call.boom, () => store.inspect(target, call));
  const stored = paths.read(seen.value);
  const entry = [lock.tag, ...(lock.maybeTag === undefined ? [] : [lock.maybeTag])].flatMap((tag) => stored.tags?.[tag] ?? []).find((candidate) => candidate.id === lock.id);
  return entry?.hold instanceof Date ? { ...known, minHoldUntil: entry.hold.getTime() } : known;
}

/** The stored end of the minimum hold (server ms) of the entry `id` of `tag` in `lock`, if it has one. */
export function storedHoldOf(lock: StoredLock, tag: string, id: string): number | undefined {
  const entry = (lock.tags?.[tag] ?? []).find((candidate) => candidate.id === id);
  return entry?.hold instanceof Date ? entry.hold.getTime() : undefined;
}
