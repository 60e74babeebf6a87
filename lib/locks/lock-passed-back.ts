import type { LockData } from '../protocol/lock-data';
import { expectOwner, isThenable } from '../common/validation';
import { Handle } from './lock-handle';

/** Ids monglock issues are 32 hex digits; any such plain string is accepted (a forged one is then `LockNotFound`). */
const LOCK_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Validates a lock passed back by a caller (a handle, or its JSON) and returns its data.
 * Throws a TypeError naming `name` for anything else, including handles edited by hand.
 */
export function readLockData(name: string, value: unknown, knownTags: ReadonlySet<string>): LockData & { readonly landsBy?: number } {
  if (isThenable(value)) {
    throw new TypeError(`Expected \`${name}\` to be a lock returned by acquire, got a Promise: did you forget \`await\`? (\`const handle = await lock.acquire(filter)\`)`);
  }
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`Expected \`${name}\` to be a lock returned by acquire, got ${value === null ? 'null' : typeof value}`);
  }
  const claim = value instanceof Handle ? Handle.claim(value) : undefined;
  const lock = (claim ?? value) as Partial<Record<keyof LockData, unknown>>;
  if (typeof lock.id !== 'string' || !LOCK_ID.test(lock.id)) {
    throw new TypeError(`Expected \`${name}.id\` to be the id string of a lock returned by acquire`);
  }
  if (typeof lock.tag !== 'string' || !knownTags.has(lock.tag)) {
    throw new TypeError(`Expected \`${name}.tag\` to be one of this lock's tags (${[...knownTags].join(', ')})`);
  }
  const numbers = ['timestamp', 'fence', 'expiresAt', 'permits', 'minHoldUntil'] as const;
  for (const key of numbers) {
    const n = lock[key];
    if (n !== undefined && (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0)) {
      throw new TypeError(`Expected \`${name}.${key}\` to be a non-negative integer`);
    }
  }
  const data = {
    id: lock.id,
    tag: lock.tag,
    timestamp: (lock.timestamp as number | undefined) ?? 0,
    fence: (lock.fence as number | undefined) ?? 0,
    expiresAt: (lock.expiresAt as number | undefined) ?? 0,
    ...(typeof lock.permits === 'number' && { permits: lock.permits }),
    ...(typeof lock.minHoldUntil === 'number' && { minHoldUntil: lock.minHoldUntil }),
    // JSON without minHoldUntil (a caller's own serialization may leave it out): the stored entry says whether the lock was taken with minHold.
    ...(!claim && typeof lock.minHoldUntil !== 'number' && { holdUnknown: true as const }),
    ...(lock.owner !== undefined && { owner: expectOwner(`${name}.owner`, lock.owner) }),
    ...(typeof lock.maybeTag === 'string' && knownTags.has(lock.maybeTag) && { maybeTag: lock.maybeTag }),
  };
  // A handle knows whether its acquisition landed; a lock passed as JSON is bounded by its stamp.
  return claim ? { ...data, landsBy: claim.landsBy } : data;
}
