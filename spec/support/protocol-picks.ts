/**
 * Which lock a command of the protocol model test acts on (one the model handed out earlier,
 * picked with a bias towards the latest), and how the command passes it to the library.
 */
import type { Real } from './protocol-harness';
import { faultable, type Fault, type ModelHandle, type ProtocolModel } from './protocol-model';

/** Picks one of the handles `eligible` keeps: two picks in three among the latest three (live locks, mostly), else any (stale ones, mostly). */
export function picked(model: Readonly<ProtocolModel>, pick: number, eligible: (handle: ModelHandle) => boolean): ModelHandle | undefined {
  return biased(model.handles.filter(eligible), pick);
}

/** The `pick`-th of `candidates` (oldest first), two picks in three among the latest three. */
export function biased<T>(candidates: readonly T[], pick: number): T | undefined {
  if (candidates.length === 0) return undefined;
  const n = Math.floor(pick / 3);
  return pick % 3 === 0 ? candidates[n % candidates.length] : candidates[candidates.length - 1 - (n % Math.min(3, candidates.length))];
}

export type Via = 'handle' | 'lock' | 'json';

/** Which handles a command may use: a faulty call only through the faulty collection; the lock's API only for a handle whose document is known; JSON only without faults (a JSON lock waits out its stamp window when settled). */
export const usable = (fault: Fault, via: Via) => (handle: ModelHandle): boolean =>
  (fault === 'none' || faultable(handle.owner)) && (via === 'handle' || !handle.unconfirmed) && (via !== 'json' || fault === 'none');

/** The lock as the command passes it: the handle, or its JSON. */
export function lockArgument(real: Real, handle: ModelHandle, via: Via): unknown {
  const given = real.handles[handle.key];
  return via === 'json' ? JSON.parse(JSON.stringify(given)) : given;
}
