/** Handles whose hold `handle.quarantine()` ended with its mark: a group's end releases nothing of them, its keeper keeps nothing. */
const quarantined = new WeakSet<object>();

/** `handle`'s quarantine landed: its hold has ended. */
export function markQuarantined(handle: object): void {
  quarantined.add(handle);
}

/** True once `handle.quarantine()` ended its hold. */
export function wasQuarantined(handle: object): boolean {
  return quarantined.has(handle);
}
