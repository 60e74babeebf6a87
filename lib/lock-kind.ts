/** What the hapi plugin (and other integrations) may ask of a lock instance made by this package. */
export interface LockDescription {
  /** The factory that made it. */
  readonly kind: 'writeLock' | 'multiLock';
  /** Its declared tags (`write` for a writeLock). */
  readonly tags: ReadonlySet<string>;
}

const descriptions = new WeakMap<object, LockDescription>();

/** Records what `lock` is; returns it. */
export function describedAs<T extends object>(lock: T, description: LockDescription): T {
  descriptions.set(lock, description);
  return lock;
}

/** What `lock` is, when this package made it; undefined for anything else. */
export function describeLock(lock: unknown): LockDescription | undefined {
  return typeof lock === 'object' && lock !== null ? descriptions.get(lock) : undefined;
}
