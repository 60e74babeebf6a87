import type { BoomLike } from '../common/errors';
import { keptLease, leaseEnded, LeaseKeeper } from '../locks/lease-keeper';
import { Handle } from '../locks/lock-handle';
import { NEVER } from '../protocol/lock-data';
import { HandleGroup } from './lock-group';

/**
 * Keeps every member of a group alive while a `usingAll()` body or a hapi route runs: each lease
 * is extended as `using()` extends one (each time half of it is left), and `controller` aborts as
 * soon as any member is lost, with that member's reason. After `maxHoldMs` renewal stops,
 * `controller` aborts with `MaxHoldExceeded` and every member is released (`onGiveUp` first).
 */
export class GroupKeeper {
  readonly #keepers: LeaseKeeper[] = [];
  readonly #unwatch: Array<() => void> = [];
  readonly #maxHoldTimer: NodeJS.Timeout | undefined;

  constructor(
    group: HandleGroup,
    controller: AbortController,
    maxHoldMs: number,
    onGiveUp: () => void = () => undefined,
    /** Builds the abort reasons (default: each lock's own `boom` option). */
    boom?: BoomLike,
  ) {
    for (const { handle, member } of HandleGroup.members(group)) {
      const leaseMs = Handle.lease(handle);
      if (handle.expiresAt >= NEVER || !Number.isFinite(leaseMs)) continue;
      const keeper = new LeaseKeeper(keptLease(handle, leaseMs, boom ?? member.core.callOptions({}).call.boom), leaseMs, controller, Infinity);
      this.#keepers.push(keeper);
      this.#unwatch.push(Handle.watchExpiry(handle, () => keeper.replan()));
    }
    if (!Number.isFinite(maxHoldMs)) return;
    const reasons = boom ?? HandleGroup.members(group)[0]?.member.core.callOptions({}).call.boom;
    this.#maxHoldTimer = setTimeout(() => {
      if (controller.signal.aborted) return;
      void this.stop();
      onGiveUp();
      controller.abort(leaseEnded('max-hold', maxHoldMs, reasons));
      void group.release().catch(() => undefined);
    }, maxHoldMs);
  }

  /** Stops every renewal; resolves once no timer and no extension is left. */
  async stop(): Promise<void> {
    clearTimeout(this.#maxHoldTimer);
    for (const unwatch of this.#unwatch.splice(0)) unwatch();
    await Promise.all(this.#keepers.map((keeper) => keeper.stop()));
  }
}
