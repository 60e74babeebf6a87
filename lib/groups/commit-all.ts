import type { Document } from 'mongodb';
import { isLockError } from '../common/errors';
import { describe, expectUpdate } from '../common/validation';
import { HandleGroup, ofRequest, settleAll } from './lock-group';

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

/** The class behind {@link CommitAll}. */
export class CommitAllRequest<T> implements CommitAll<T> {
  constructor(
    readonly updates: ReadonlyArray<Document | null | undefined>,
    readonly value: T,
  ) {}
}

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
 * Applies `updates` (one per request, validated all before any is written) by the releases of
 * `group`'s members, in canonical order; the members without an update are released after them.
 * The one place that decides how a group commits: a transactional variant would replace it.
 */
export async function applyCommits(group: HandleGroup, updates: unknown): Promise<void> {
  const members = HandleGroup.members(group);
  if (!Array.isArray(updates) || updates.length !== group.length) {
    throw new TypeError(`Expected \`commitAll(updates)\` to have one update (or null) per request, ${group.length} in all, got ${describe(updates)}`);
  }
  const asked = members.map(({ member }) => {
    const update: unknown = updates[member.index];
    return update === null || update === undefined ? undefined : expectUpdate(`updates[${member.index}]`, update, member.core.engine.field);
  });
  const outcomes: CommitOutcome[] = updates.map((update: unknown) => (update === null || update === undefined ? null : false));
  for (const [i, held] of members.entries()) {
    const update = asked[i];
    if (!update) continue;
    try {
      await held.handle.release({ update }, group.id);
      outcomes[held.member.index] = true;
    } catch (error) {
      const applied = (error as { data?: { applied?: unknown } }).data?.applied;
      outcomes[held.member.index] = isLockError(error, 'DbError') && applied === 'unknown' ? 'unknown' : false;
      // Not applied (refused or unknown): its lock is released without it, as `using()` does, and so is every later member.
      const lost = isLockError(error, 'LockNotFound') || isLockError(error, 'LockWasReacquired');
      const unreleased = members.filter((other, j) => j > i || (j < i && !asked[j]) || (j === i && !lost));
      await Promise.all(unreleased.map(({ handle }) => handle.release().catch(() => undefined)));
      const named = ofRequest(error, held.member.index, held.member.core.namespace);
      if (named instanceof Error) Object.defineProperty(named, 'commits', { value: outcomes, enumerable: true, writable: true, configurable: true });
      throw named;
    }
  }
  await settleAll(
    members.filter((_, i) => !asked[i]),
    ({ handle }) => handle.release(),
  );
}

/** `value instanceof CommitAll` is true for what {@link commitAll} returns. */
export const CommitAll: {
  readonly prototype: CommitAll<unknown>;
  [Symbol.hasInstance](value: unknown): value is CommitAll<unknown>;
} = CommitAllRequest as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])
