import { acquireOperation, type AcquireRequest } from './acquire';
import type { LockOperation } from './operation';

/**
 * Hand-over: the holder of an exclusive lock releases it and its next waiter acquires it, in one
 * update. It is the waiter's acquisition ({@link acquireOperation}, every check included: its
 * stamp, the cooperative tags, the fair queue) on the holder's document (`{ _id }`), in which the
 * holder's entry `holder` does not count as a live lock, and which matches only while that entry
 * is there (its lease may have run out: nobody else can have acquired since, or the entry would
 * be gone). Replacing the tag's array removes the holder's entry and writes the waiter's, +1 on
 * the fence.
 *
 * Why it never admits a second holder: before the update the holder's entry was the only live one
 * of the tag, after it the waiter's is; an update that matches nothing changes nothing, and the
 * holder then releases as usual (lib/protocol/release.ts).
 */
export function handOverOperation(acquire: AcquireRequest & { readonly holder: string }): LockOperation {
  return acquireOperation({ ...acquire, replacing: acquire.holder });
}
