/**
 * The ids of the locks this process released last, so that a second release (or an extension)
 * of one of them can say that it was already released here, not only that it is not held. Lock
 * ids are 128 random bits: no other lock shares one.
 */

/** How many ids are kept: the oldest is forgotten first (a lock released long ago is reported as not held). */
const REMEMBERED = 10_000;
const released = new Set<string>();

/** Notes that the lock `id` was released (or handed over) by this process. */
export function noteReleased(id: string): void {
  if (id === '') return;
  released.delete(id);
  released.add(id);
  if (released.size > REMEMBERED) released.delete(released.values().next().value as string);
}

/** True when this process released the lock `id` (among the last {@link REMEMBERED} it released). */
export function releasedHere(id: string): boolean {
  return released.has(id);
}
