import type { DocumentLock } from './document-lock';

/** What the hapi plugin, groups and other integrations may ask of a lock instance made by this package. */
export interface LockDescription {
  /** The factory that made it. */
  readonly kind: 'writeLock' | 'multiLock' | 'semaphore';
  /** Its declared tags (`write` for a writeLock). */
  readonly tags: ReadonlySet<string>;
  /** The property of each document that holds its lock. */
  readonly field: string;
  /** The lock itself, which a group (`acquireAll`) acquires through. */
  readonly core: DocumentLock;
}

const descriptions = new WeakMap<object, LockDescription>();

/**
 * Records what `lock` is; returns it. Recorded under its `acquire` function too: hapi deep-copies
 * route options, and a copy of a lock keeps the same functions.
 */
export function describedAs<T extends { acquire: unknown }>(lock: T, description: LockDescription): T {
  descriptions.set(lock, description);
  if (typeof lock.acquire === 'function') descriptions.set(lock.acquire, description);
  return lock;
}

/** What `lock` (or a copy of it) is, when this package made it; undefined for anything else. */
export function describeLock(lock: unknown): LockDescription | undefined {
  if (typeof lock !== 'object' || lock === null) return undefined;
  const acquire: unknown = (lock as { acquire?: unknown }).acquire;
  return descriptions.get(lock) ?? (typeof acquire === 'function' ? descriptions.get(acquire) : undefined);
}
