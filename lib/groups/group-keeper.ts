import { wasQuarantined } from '../locks/ended-holds';
import type { BoomLike } from '../common/errors';
import { keptLease, leaseEnded, LeaseKeeper } from '../locks/lease-keeper';
import { Handle } from '../locks/lock-handle';
import { NEVER } from '../protocol/lock-data';
import { endMembers, RELEASE_NOW, type MemberEnding } from './kept-members';
import { HandleGroup, type HeldMember } from './lock-group';

/** What a {@link GroupKeeper} does besides keeping the leases. */
export interface GroupKeeping {
  /** Runs when `maxHold` passes, with the members' release (which never rejects). */
  readonly onGiveUp?: (releasing: Promise<unknown>) => void;
  /** Builds the abort reasons (default: each lock's own `boom` option). */
  readonly boom?: BoomLike;
  /** How each member ends, by what the caller's transaction wrote of it (`usingAll()`); default: released now. */
  readonly ending?: MemberEnding;
}

/**
 * Keeps every member of a group alive while a `usingAll()` body or a hapi route runs: each lease
 * is extended as `using()` extends one (each time half of it is left), and `controller` aborts as
 * soon as any member is lost, with that member's reason. After `maxHoldMs` renewal stops,
 * `controller` aborts with `MaxHoldExceeded` and every member is ended (`onGiveUp` is given that release). A member
 * released in the caller's transaction is no longer kept, as `using()` does.
 */
export class GroupKeeper {
  readonly #keepers: Array<{ readonly keeper: LeaseKeeper; readonly held: HeldMember }> = [];
  readonly #unwatch: Array<() => void> = [];
  readonly #maxHoldTimer: NodeJS.Timeout | undefined;
  readonly #ending: MemberEnding;

  constructor(group: HandleGroup, controller: AbortController, maxHoldMs: number, keeping: GroupKeeping = {}) {
    const { onGiveUp = () => undefined, boom, ending = RELEASE_NOW } = keeping;
    this.#ending = ending;
    for (const held of HandleGroup.members(group)) {
      const { handle, member } = held;
      const leaseMs = Handle.lease(handle);
      if (handle.expiresAt >= NEVER || !Number.isFinite(leaseMs)) continue;
      // Extended with the keeping's boom when it has one (the hapi plugin's): a refused extension is then its boom, as a one-document route's is.
      const lease = { ...keptLease(handle, leaseMs, boom ?? member.core.callOptions({}).call.boom, boom ? { boom } : {}), letGo: () => ending(held) === 'released' || wasQuarantined(handle) };
      const keeper = new LeaseKeeper(lease, leaseMs, controller, Infinity);
      this.#keepers.push({ keeper, held });
      this.#unwatch.push(Handle.watchExpiry(handle, () => keeper.replan()));
    }
    if (!Number.isFinite(maxHoldMs)) return;
    const reasons = boom ?? HandleGroup.members(group)[0]?.member.core.callOptions({}).call.boom;
    this.#maxHoldTimer = setTimeout(() => {
      if (controller.signal.aborted) return;
      void this.stop();
      const releasing = endMembers(HandleGroup.members(group), ending).catch(() => undefined);
      onGiveUp(releasing);
      controller.abort(leaseEnded('max-hold', maxHoldMs, reasons));
    }, maxHoldMs);
  }

  /**
   * Stops every renewal; resolves once no timer and no extension is left, but an extension sent
   * while the caller's transaction holds its document (it lands once that transaction ends).
   */
  async stop(): Promise<void> {
    clearTimeout(this.#maxHoldTimer);
    for (const unwatch of this.#unwatch.splice(0)) unwatch();
    await Promise.all(
      this.#keepers.map(({ keeper, held }) => {
        const stopping = keeper.stop();
        return this.#ending(held) === 'release' ? stopping : undefined;
      }),
    );
  }
}
