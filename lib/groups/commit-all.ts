import type { Document } from 'mongodb';
import { compareBson } from '../common/bson-order';
import { isLockError, lockError, withDbErrors } from '../common/errors';
import { CommitAllRequest } from '../locks/commit';
import { describe, expectUpdate } from '../common/validation';
import type { Located } from './group-request';
import { endMembers, RELEASE_NOW, type MemberEnding } from './kept-members';
import { HandleGroup, ofRequest, type HeldMember } from './lock-group';

/**
 * What a `usingAll()` body (or a hapi route locking several documents) returns to end with one
 * final update per document: `updates[i]` (update operators, or `null`/`undefined` for none) is
 * applied to the document of `requests[i]` by that document's own release, only while its lock is
 * still held. Made by {@link commitAll}.
 */
export interface CommitAll<T = undefined> {
  /** One update per request, in the order of the requests. */
  readonly updates: ReadonlyArray<Document | null | undefined>;
  /** What the call resolves once every update is applied. */
  readonly value: T;
}

/** The class behind {@link CommitAll} (in lib/locks/commit.ts, so that `using()` can refuse it). */
export { CommitAllRequest };

/**
 * What became of each update of a {@link commitAll} that failed, in the order of the requests:
 * `true` it landed, `false` it was not applied (and never will be), `'unknown'` its reply was lost
 * and it could not be settled, `null` none was asked for.
 */
export type CommitOutcome = boolean | 'unknown' | null;

/**
 * Ends a group's critical section with one update per document, each applied by its document's
 * release, only while its lock is held, one after another in the group's canonical order. These
 * are separate writes (no transaction): if one is refused or its outcome is unknown, the ones
 * before it in canonical order have landed, the ones after it are not applied, every lock is
 * released, and the error says which request failed (`err.request`) and what became of each
 * update (`err.commits`). Each landed commit leaves a record with the group's id in its document
 * (`lock.committed[].group`), so whoever locks the documents next can tell which landed.
 * @example
 * await usingAll(transfer, { document: true }, ([from, to]) =>
 *   commitAll([{ $inc: { balance: -amount } }, { $inc: { balance: amount } }], 'moved'));
 */
export function commitAll<T = undefined>(updates: ReadonlyArray<Document | null | undefined>, value?: T): CommitAll<T> {
  return new CommitAllRequest(updates, value as T);
}

/**
 * Applies `updates` (one per request, validated all before any is written, none touching a lock
 * field of its document) by the releases of `group`'s members, in canonical order, once a read has
 * found every member without an update still held; those are released after the commits.
 * `beforeWrite` runs before each write and may throw to stop (a hapi route whose answer went out).
 * A member without an update ends as `ending` says (`usingAll()` inside the caller's transaction): one
 * released in that transaction is neither read nor released here.
 * The one place that decides how a group commits: a transactional variant would replace it.
 */
export async function applyCommits(group: HandleGroup, updates: unknown, beforeWrite: () => void = () => undefined, ending: MemberEnding = RELEASE_NOW): Promise<void> {
  const members = HandleGroup.members(group);
  if (!Array.isArray(updates) || updates.length !== group.length) {
    throw new TypeError(`Expected \`commitAll(updates)\` to have one update (or null) per request, ${group.length} in all, got ${describe(updates)}`);
  }
  const asked = members.map(({ member }) => {
    const update: unknown = updates[member.index];
    if (update === null || update === undefined) return undefined;
    // Never a lock field of this document, its own or another member's (a semaphore's permits, say).
    const fields = members.filter(({ member: other }) => sameDocument(other, member)).map(({ member: other }) => other.core.engine.field);
    for (const field of new Set(fields)) expectUpdate(`updates[${member.index}]`, update, field);
    return update as Document;
  });
  const outcomes: CommitOutcome[] = updates.map((update: unknown) => (update === null || update === undefined ? null : false));
  const failed = async (error: unknown, at: number, index: number, released: (j: number) => boolean): Promise<never> => {
    await endMembers(members.filter((_, j) => !released(j)), ending).catch(() => undefined);
    const named = ofRequest(error, index, members[at]!.member.core.namespace);
    if (named instanceof Error) Object.defineProperty(named, 'commits', { value: outcomes, enumerable: true, writable: true, configurable: true });
    throw named;
  };
  // A member without an update is part of the section too: if it was lost, no update is applied.
  const lost = await firstLost(members, members.map((held, i) => asked[i] !== undefined || ending(held) === 'released'));
  if (lost) return failed(lost.error, lost.at, members[lost.at]!.member.index, () => false);
  for (const [i, held] of members.entries()) {
    const update = asked[i];
    if (!update) continue;
    try {
      beforeWrite();
      await held.handle.release({ update }, group.id);
      outcomes[held.member.index] = true;
    } catch (error) {
      const applied = (error as { data?: { applied?: unknown } }).data?.applied;
      outcomes[held.member.index] = isLockError(error, 'DbError') && applied === 'unknown' ? 'unknown' : false;
      // Not applied (refused, stopped or unknown): its lock is released without it, as `using()` does, and so is every later member.
      const lost = isLockError(error, 'LockNotFound') || isLockError(error, 'LockWasReacquired');
      return failed(error, i, held.member.index, (j) => (j < i && asked[j] !== undefined) || (j === i && lost));
    }
  }
  try {
    await endMembers(
      members.filter((_, i) => !asked[i]),
      ending,
    );
  } catch (error) {
    if (error instanceof Error) Object.defineProperty(error, 'commits', { value: outcomes, enumerable: true, writable: true, configurable: true });
    throw error;
  }
}

/**
 * The first member (canonical position) but those `skipped` (with an update, or released in the
 * caller's transaction) that a read no longer finds held, or whose read failed, and why; undefined
 * when every one is held.
 */
async function firstLost(members: readonly HeldMember[], skipped: readonly boolean[]): Promise<{ at: number; error: unknown } | undefined> {
  const checks = await Promise.all(
    members.map(async ({ handle, member }, i) => {
      if (skipped[i]) return undefined;
      const { call } = member.core.callOptions({});
      try {
        const ids = await withDbErrors(call.boom, () => member.core.engine.store.idsMatching(handle.guard(), call));
        return ids.length === 1 ? undefined : lockError('LockNotFound', call.boom, { detail: 'lost before the commits started: no update was applied' });
      } catch (error) {
        return error;
      }
    }),
  );
  const at = checks.findIndex((error) => error !== undefined);
  return at < 0 ? undefined : { at, error: checks[at] };
}

/** True when two members lock the same document (another lock field of it, or the same). */
function sameDocument(a: Located, b: Located): boolean {
  return a.core.namespace === b.core.namespace && compareBson(a.id, b.id) === 0;
}

/** `value instanceof CommitAll` is true for what {@link commitAll} returns. */
export const CommitAll: {
  readonly prototype: CommitAll<unknown>;
  [Symbol.hasInstance](value: unknown): value is CommitAll<unknown>;
} = CommitAllRequest as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])
