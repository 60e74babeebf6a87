/**
 * The interleavings' minimum-hold operations: a run-once job (writeLock `j0`, taken with `minHold`,
 * released as soon as its body ends) and calls under a rate limit (the semaphore's permits of `t0`,
 * each taken with `minHold` {@link RATE_WINDOW}: at most the limit per window). Their holds carry
 * their acquisition stamps, which the history checker's `minHold` and `rate` rules judge.
 */
import type { LockHandle, MultiLock, Semaphore, WriteLock } from '../lib';
import type { Operation } from './interleaving-scenario';

/** The document of the rate-limited calls (its own: the semaphore's plain permits are on `s0`, and a document's permits agree on one window). */
export const RATE_TARGET = 't0';
/** The rate limit's window, in ms (under the semaphore's 700 ms lease). */
export const RATE_WINDOW = 300;

/** What a hold event records besides its span: its permits and limit, its holder and token, and for a lock taken with minHold its minimum hold or rate window. */
export interface HoldDetails {
  readonly permits?: number;
  readonly limit?: number;
  readonly holder?: string;
  readonly fence?: number;
  readonly minHold?: number;
  readonly window?: number;
}

/** The locks of one client that these operations use. */
interface MinHoldLocks {
  readonly write: WriteLock;
  readonly multi: MultiLock;
  readonly permits: Semaphore;
}

/** What the hold of a minimum-hold operation records: a job's minHold, or a rate-limited call's permit, limit and window. */
export function minHoldOf(operation: Extract<Operation, { kind: 'runOnce' | 'rate' }>, limit: number): HoldDetails {
  return operation.kind === 'runOnce' ? { minHold: operation.minHold } : { permits: 1, limit, window: RATE_WINDOW };
}

/** Runs a run-once job or a rate-limited call with `body` as its section. */
export function runWithMinHold(
  operation: Extract<Operation, { kind: 'runOnce' | 'rate' }>,
  locks: MinHoldLocks,
  params: { readonly wait: number; readonly signal: AbortSignal },
  body: (handle: LockHandle, signal: AbortSignal) => Promise<void>,
): Promise<void> {
  if (operation.kind === 'runOnce') return locks.write.using({ _id: 'j0' }, { ...params, locktimeout: 600, minHold: operation.minHold }, body);
  return locks.permits.using({ _id: RATE_TARGET }, { ...params, minHold: RATE_WINDOW }, body);
}
