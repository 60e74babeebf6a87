import type { Document } from 'mongodb';
import type { StoredEntry, StoredLock } from './stored-format';

/** How a caller proves it owns a lock: its id, or (monglock v2 writeLock) its acquisition timestamp. */
export type Proof = { readonly id: string } | { readonly timestamp: number };

/**
 * The array-element condition that picks out the entry `proof` names. A v2 timestamp never names
 * an entry of a lock taken with `minHold` (one with `hold`): that lock is released by its handle,
 * and the entry a release keeps keeps its `at` but is no hold (lib/protocol/min-hold.ts).
 */
export function proofMatch(proof: Proof): Document {
  if ('id' in proof) return { id: proof.id };
  return { at: { $gte: new Date(proof.timestamp), $lt: new Date(proof.timestamp + 1) }, hold: { $exists: false } };
}

/** True when `entry` is the one `proof` names. */
export function matchesProof(entry: StoredEntry, proof: Proof): boolean {
  if ('id' in proof) return entry.id === proof.id;
  const at = entry.at instanceof Date ? entry.at.getTime() : NaN;
  return at >= proof.timestamp && at < proof.timestamp + 1 && entry.hold === undefined;
}

/** True when two of `tag`'s recent acquisitions were stamped in the ms `timestamp`: a v2 timestamp cannot tell them apart. */
export function ambiguous(lock: StoredLock, tag: string, timestamp: number): boolean {
  return (lock.recent?.[tag] ?? []).filter((date) => date.getTime() >= timestamp && date.getTime() < timestamp + 1).length >= 2;
}
