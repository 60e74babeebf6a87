import { wasQuarantined } from '../locks/ended-holds';
import { isLockError } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { readParams, type HoldParams } from '../common/options';
import { expectFunction, expectMaxHold } from '../common/validation';
import { CommitRequest, FOREIGN_COMMIT, isBareUpdate, isForeignCommit } from '../locks/commit';
import { Quarantine } from '../locks/quarantine';
import { DEFAULT_MAX_HOLD } from '../locks/lease-keeper';
import type { LockHandle } from '../locks/lock-handle';
import { ACQUIRE_ALL_KEYS, acquireGroup, GROUP_MISPLACED, type AcquireAllParams } from './acquire-all';
import { applyCommits, CommitAllRequest, type CommitAll } from './commit-all';
import { GroupKeeper } from './group-keeper';
import { endMembers, keepingMembers, type MemberEnding } from './kept-members';
import { HandleGroup, type LockGroup } from './lock-group';

/** Options of {@link usingAll}: those of `acquireAll`, and `maxHold`. */
export interface UsingAllParams extends AcquireAllParams, HoldParams {}

/** The body of `usingAll()`: runs while every member is held; `signal` aborts as soon as one is lost. It may return {@link commitAll}. */
export type UsingAllBody<T, G = LockGroup> = (group: G, signal: AbortSignal) => T | CommitAll<T> | PromiseLike<T | CommitAll<T>>;

const USING_ALL = knownKeys<UsingAllParams>()([...ACQUIRE_ALL_KEYS, 'maxHold'], GROUP_MISPLACED);

/**
 * `usingAll` (typed in group-api.ts). Locks several documents as `acquireAll` does, runs `body` while keeping every lease alive,
 * aborts the body's `signal` as soon as one member is lost (or `params.signal` aborts, or
 * `maxHold` passes: then every member is released), and always releases them all. Resolves the
 * body's result; a body that returns {@link commitAll} has each document's update applied by its
 * release, only if every member is still held when it starts (see `commitAll` for what a caller
 * sees when one of them fails). A body error is never masked by a release failure. Run inside the
 * caller's transaction, a member its body released, committed or extended there ends as with
 * `using()`: no release of its own, or one in the background once the transaction ends.
 */
export async function useGroup<T>(requests: unknown, params: unknown, body: unknown): Promise<T> {
  const work = expectFunction<UsingAllBody<T, HandleGroup & LockHandle[]>>('body', body);
  const p = readParams('params', params, USING_ALL);
  const maxHoldMs = expectMaxHold('params.maxHold', p.maxHold, DEFAULT_MAX_HOLD);
  const acquireParams = Object.fromEntries(Object.entries(p).filter(([key]) => key !== 'maxHold'));
  const group = await acquireGroup(requests, acquireParams);
  return keepingMembers(group, (ending) => holdGroup(group, p.signal as AbortSignal | undefined, maxHoldMs, ending, work));
}

/**
 * Runs `work` while `group` is held, then ends every member: as `ending` says, for a member the
 * caller's transaction wrote (see `HoldEnd`), and otherwise by its release (with its commit).
 */
async function holdGroup<T>(group: HandleGroup, outer: AbortSignal | undefined, maxHoldMs: number, ending: MemberEnding, work: UsingAllBody<T, HandleGroup & LockHandle[]>): Promise<T> {
  const members = HandleGroup.members(group);
  const end = (): Promise<void> => endMembers(members, ending).catch(() => undefined);
  const controller = new AbortController();
  const forward = (): void => controller.abort(outer?.reason);
  if (outer?.aborted) forward();
  else outer?.addEventListener('abort', forward, { once: true });
  const keeper = new GroupKeeper(group, controller, maxHoldMs, { ending });
  const stopKeeping = async (): Promise<void> => {
    outer?.removeEventListener('abort', forward);
    await keeper.stop();
  };
  let result: T | CommitAll<T>;
  try {
    result = await work(group, controller.signal);
  } catch (error) {
    await stopKeeping();
    await end();
    throw error;
  }
  await stopKeeping();
  // A member was lost, maxHold passed or the caller aborted: nothing the body returns is applied.
  if (controller.signal.aborted) {
    await end();
    throw controller.signal.reason;
  }
  if (result instanceof CommitRequest) {
    await end();
    throw new TypeError('Expected a `usingAll()` body to return `commitAll([update, …], value)`, one update per request: `commit(update)` is for one document');
  }
  if (result instanceof Quarantine) {
    await end();
    throw new TypeError('Expected a `usingAll()` body not to return `quarantine(reason)`, which ends one document\'s hold (`using()`, or `handle.quarantine()` on a member): nothing was written, and every lock was released');
  }
  if (result instanceof CommitAllRequest) {
    try {
      await applyCommits(group, result.updates, undefined, ending);
    } catch (error) {
      if (error instanceof TypeError) await end();
      throw error;
    }
    return result.value;
  }
  if (isBareUpdate(result)) {
    await end();
    throw new TypeError('Expected a `usingAll()` body to return `commitAll([update, …], value)` to write its updates, got update documents (`{ $set: … }`) alone: nothing was written, and every lock was released');
  }
  if (isForeignCommit(result)) {
    await end();
    throw new TypeError(`Expected a \`usingAll()\` body to return this copy's \`commitAll([update, …], value)\`, got ${FOREIGN_COMMIT}: nothing was written, and every lock was released`);
  }
  // A document the body deleted is no failure (as with `using()`); any other member's is. A member the body quarantined (`handle.quarantine()`) has ended already.
  await endMembers(members.filter(({ handle }) => !wasQuarantined(handle)), ending, (error) => isLockError(error, 'RessourceNotFound'));
  return result as T;
}
