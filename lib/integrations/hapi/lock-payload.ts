import type { LockData } from '../../protocol/lock-data';
import { describeLock } from '../../locks/lock-kind';
import { readLockData } from '../../locks/lock-passed-back';
import { describe, isPlainObject } from '../../common/validation';

/** A payload that names the lock it releases or extends, the other keys as sent. */
export type LockPayload = Record<string, unknown> & { readonly lock: LockData };

/**
 * A route's `validate.payload` for a checkin or an extension of a checked-out lock: the payload
 * must carry `lock`, the JSON of a lock that `lock` (the route's writeLock, multiLock or semaphore)
 * returned, else hapi answers 400 before the handler runs. Without it, a payload with no `lock`
 * would ask `release` for nothing the client proved (refused with a `TypeError`, answered 500).
 * Other keys of the payload are passed on as sent. It resolves the payload (or rejects), as
 * hapi's type of a validation function asks, so a route compiles for a user whose hapi types
 * are checked with joi installed.
 *
 * @example
 * server.route({ method: 'POST', path: '/drafts/{id}/checkin',
 *   options: { validate: { payload: lockPayload(drafts) }, handler: … } });
 */
export function lockPayload(lock: object): (payload: unknown) => Promise<LockPayload> {
  const description = describeLock(lock);
  if (!description) throw new TypeError(`Expected \`lockPayload\`'s lock to be a writeLock, multiLock or semaphore instance, got ${describe(lock)}`);
  // Async, as hapi's validation type asks of a function (it awaits it; a rejection is its 400).
  return async (payload) => {
    if (!isPlainObject(payload)) throw new TypeError(`Expected the payload to be an object with the checked-out \`lock\`, got ${describe(payload)}`);
    return { ...payload, lock: readLockData('payload.lock', payload.lock, description.tags) };
  };
}
