import { AsyncLocalStorage } from 'node:async_hooks';
import { expectOwner } from '../common/validation';

/** The owner of the reentrant acquisitions made within a {@link withOwner} call. */
const context = new AsyncLocalStorage<string>();

/**
 * Runs `body` with `owner` as the default `owner` of every writeLock and multiLock acquisition it
 * makes (and those its async calls make), so that nested `using()` calls on one document within
 * one request re-enter instead of waiting for themselves. An explicit `params.owner` wins; a
 * semaphore ignores it (its holders are counted, not owned).
 * @example
 * await withOwner(request.info.id, () => handler(request));
 */
export function withOwner<T>(owner: string, body: () => T): T {
  return context.run(expectOwner('owner', owner), body);
}

/** The owner of the current async context ({@link withOwner}), if any. */
export function contextOwner(): string | undefined {
  return context.getStore();
}
