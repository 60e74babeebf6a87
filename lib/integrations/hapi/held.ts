import type { Document } from 'mongodb';
import type { BoomLike } from '../../common/errors';
import { CommitRequest } from '../../locks/commit';
import { keptLease, LeaseKeeper } from '../../locks/lease-keeper';
import { Handle } from '../../locks/lock-handle';
import { applyCommits, CommitAllRequest } from '../../groups/commit-all';
import { GroupKeeper } from '../../groups/group-keeper';
import type { HandleGroup } from '../../groups/lock-group';

/** What a locked request holds: one lock (`filter`), or a group of them (`filters`). */
export interface Held {
  /** The lock, or the group's first (in the order of the route's filters). */
  readonly lock: Handle;
  /** The group, for a route with `filters`. */
  readonly group: HandleGroup | undefined;
  /** Releases everything held. */
  release(): Promise<void>;
  /**
   * Applies what the handler returned (`commit` for one lock, `commitAll` for a group) with the
   * release; rejects when it was not applied. `beforeWrite` runs right before each write and
   * throws to stop (the answer went out, the lease was lost).
   */
  commit(result: CommitRequest<unknown, Document> | CommitAllRequest<unknown>, beforeWrite: () => void): Promise<void>;
  /**
   * Keeps every lease alive while the route runs; aborts `controller` once one is lost. After
   * `maxHoldMs` it releases everything, calls `onGiveUp` with that release and aborts with `MaxHoldExceeded`.
   */
  keep(controller: AbortController, maxHoldMs: number, onGiveUp: (releasing: Promise<unknown>) => void): { stop(): Promise<void> };
}

/** A route's one lock. */
export function heldLock(lock: Handle, boom: BoomLike): Held {
  return {
    lock,
    group: undefined,
    release: () => lock.release(),
    commit: async (result, beforeWrite) => {
      if (!(result instanceof CommitRequest)) throw boom.badImplementation('monglock: a route that locks one document ends with commit(update, value), not commitAll');
      beforeWrite();
      await lock.release({ ...result.options, update: result.update, boom });
    },
    keep(controller, maxHoldMs, onGiveUp) {
      const leaseMs = Handle.lease(lock);
      const giveUp = (): Promise<void> => {
        const releasing = lock.release();
        onGiveUp(releasing.catch(() => undefined));
        return releasing;
      };
      // Extended with the plugin's boom: a refused extension (the lease lost) answers 409 LockNotFound, as other lock errors do.
      const keeper = new LeaseKeeper({ ...keptLease(lock, leaseMs, boom, { boom }), release: giveUp }, leaseMs, controller, maxHoldMs);
      const unwatch = Handle.watchExpiry(lock, () => keeper.replan()); // the route extends the lock itself
      return {
        stop: async () => {
          unwatch();
          await keeper.stop();
        },
      };
    },
  };
}

/** A route's group (`filters`). */
export function heldGroup(group: HandleGroup, boom: BoomLike): Held {
  return {
    lock: group[0]!,
    group,
    release: () => group.release(),
    commit: async (result, beforeWrite) => {
      if (!(result instanceof CommitAllRequest)) throw boom.badImplementation('monglock: a route that locks several documents ends with commitAll([update, …], value), not commit');
      await applyCommits(group, result.updates, beforeWrite);
    },
    keep: (controller, maxHoldMs, onGiveUp) => new GroupKeeper(group, controller, maxHoldMs, { onGiveUp, boom }),
  };
}
