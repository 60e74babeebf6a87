import type { Document } from 'mongodb';
import { fenceOf } from './lock-data';
import type { LockOperation } from './operation';
import type { LockPaths, StoredLock } from './stored-format';

/** The tag under which an election stores its leader's entry (exclusive: cooperative with itself). */
export const LEADER_TAG = 'leader';

/** Who leads an election, as read by the server's clock. */
export interface LeaderState<V = unknown> {
  /** What the leader proclaimed (its campaign's `value`, then each `proclaim`); null when it gave none. */
  readonly value: V;
  /** The document's fencing token: the leader's when nothing else locks this document's field (see docs/api.md#elections). */
  readonly fence: number;
  /** When its lease ends unless renewed, by the server's clock. */
  readonly expiresAt: Date;
}

/** The live leader entry of a stored lock at server time `now` (ms): its id and state, or undefined when nobody leads. */
export function leaderOf(stored: StoredLock, now: number): { readonly id: string; readonly state: LeaderState } | undefined {
  const entries: unknown = stored.tags?.[LEADER_TAG];
  if (!Array.isArray(entries)) return undefined;
  const live = (entries as Array<Document & { id: string; exp: Date }>).find((entry) => entry.exp instanceof Date && entry.exp.getTime() > now);
  if (!live) return undefined;
  return { id: live.id, state: { value: live.value ?? null, fence: fenceOf(stored), expiresAt: live.exp } };
}

/** Proclaim: sets the value of the leader entry `id`, in the document `guard` matches only while that entry holds (its guard filter). */
export function proclaimOperation(paths: LockPaths, guard: Document, id: string, value: unknown): LockOperation {
  return { filter: guard, update: { $set: { [`${paths.tag(LEADER_TAG)}.$[term].value`]: value } }, arrayFilters: [{ 'term.id': id }] };
}
