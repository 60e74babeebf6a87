import type { Handle } from '../locks/lock-handle';
import { endHold, type HoldEnd, type TransactionWrites } from '../locks/transaction-writes';
import { HandleGroup, settleAll, type HeldMember } from './lock-group';

/** How each member of a group ends once the section is over, by what the caller's transaction wrote of it (see {@link HoldEnd}). */
export type MemberEnding = (held: HeldMember) => HoldEnd;

/** Every member released now: a group whose members no transaction is followed for (a hapi route's). */
export const RELEASE_NOW: MemberEnding = () => 'release';

/**
 * Runs `hold` (a `usingAll()`) while every member of `group` is kept by its lock's
 * `TransactionWrites`, as `using()` keeps its one lock: a member released, committed or extended in
 * the caller's transaction, whichever way (its handle, or the lock's `release`/`extend` with the
 * handle or its JSON), ends as `ending` then says.
 */
export async function keepingMembers<T>(group: HandleGroup, hold: (ending: MemberEnding) => Promise<T>): Promise<T> {
  const kept = new Map(HandleGroup.members(group).map(({ member, handle }): [Handle, ReturnType<TransactionWrites['keep']>] => [handle, member.core.transactionWrites.keep(handle)]));
  try {
    return await hold(({ handle }) => kept.get(handle)?.ending() ?? 'release');
  } finally {
    for (const { done } of kept.values()) done();
  }
}

/**
 * Ends every member of `held` at once as `ending` says: released now, nothing sent (released in the
 * caller's transaction), or released in the background after that transaction. Rejects as
 * {@link settleAll} does, with a release that failed but those `ignore` accepts.
 */
export function endMembers(held: readonly HeldMember[], ending: MemberEnding, ignore?: (error: unknown) => boolean): Promise<void> {
  return settleAll(held, (member) => endHold(ending(member), () => member.handle.release(), member.member.core.callOptions({}).call.timeout), ignore);
}
