import type { BoomLike } from '../common/errors';
import { lockError, type ConflictSubtype, type LockErrorSubtype } from '../common/errors';
import { fenceOf, queuedBehind, type LockData, type Ticket, type TagRule } from '../protocol/lock-data';
import { isLimited, limitMismatch, usedPermits } from '../protocol/permits';
import { holdsOf, type OwnedAcquisition } from '../protocol/reentry';
import { pendingUpgrade } from '../protocol/convert';
import { ambiguous, matchesProof, type Proof } from '../protocol/proofs';
import { liveEntries, undeadEntries, type LockPaths, type StoredLock } from '../protocol/stored-format';
import { earlierTickets } from '../protocol/tickets';
import { refusedBy } from './acquired';
import { laterStampVerdict, stampLag, stampRefused, type Verdict } from './stamp-refusals';
import { releasedHere } from './recent-releases';
import { quarantinedVerdict } from './quarantined';
import type { Inspection } from './store';

/** Why an update that needed a document matched nothing: there is none. */
export function noDocument(boom: BoomLike | undefined): Verdict {
  return { retry: false, error: lockError('RessourceNotFound', boom, { detail: 'no document matches the filter' }) };
}

/** What explains a refused acquisition. */
export interface AcquireContext {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** The subtype of a refusal. */
  readonly conflict: ConflictSubtype;
  readonly lease: number;
  /** For a tag with a limit: the permits asked for. */
  readonly permits?: number;
  /** An owner's first hold: refused because the owner holds the lock already, or the counter moved on, it is tried again (see {@link ownerMayRetry}). */
  readonly owned?: OwnedAcquisition;
  readonly boom: BoomLike | undefined;
  readonly fair?: { readonly ticket?: Ticket };
  /** Why the lock kind's own conditions refuse `lock` at server time `now` (ms), if they do. */
  readonly refusal?: (lock: StoredLock, now: number) => string | undefined;
  /** A rate limit's window (ms): permits of a limited tag taken with minHold (lib/protocol/rate-window.ts). */
  readonly window?: number;
}

/**
 * Explains an acquisition that matched nothing, from a read of the document: no document; a live
 * quarantine mark (`Quarantined`, final: it wins over every other refusal); processes
 * that disagree on the tag's limit (`LimitMismatch`); held by a cooperative tag; waiters first in line
 * (fair mode); too few permits left; a later acquisition stamped meanwhile (retry with a later
 * stamp); a stamp the server refused (retry); the kind's own conditions.
 */
export function explainRefusedAcquisition(context: AcquireContext, seen: Inspection, stamp: number, tolerance: number): Verdict {
  const { paths, rule, conflict, boom } = context;
  if (!seen.value) return noDocument(boom);
  const lock = paths.read(seen.value);
  const now = seen.serverNow?.getTime() ?? stamp;
  const refused = (detail: string): Verdict => ({ retry: false, error: refusedBy(lockError(conflict, boom, { detail }), seen.value?._id) });
  const quarantined = quarantinedVerdict(lock, now, boom, seen.value._id);
  if (quarantined) return quarantined;
  const mismatch = limitMismatch(lock, rule, now, context.window);
  if (mismatch !== undefined) return { retry: false, error: refusedBy(lockError('LimitMismatch', boom, { detail: mismatch }), seen.value._id) };
  const holders = rule.cooperative.filter((other) => liveEntries(lock, other, now).length > 0);
  if (context.owned && (holdsOf(lock, rule.tag, context.owned.owner, now).length > 0 || (holders.length === 0 && (lock.fence ?? 0) !== context.owned.counter))) {
    const verdict = refused(holders.length > 0 ? `held by tag ${holders.join(', ')}` : 'the fencing counter moved on');
    if (!verdict.retry) ownerRetries.add(verdict.error);
    return verdict;
  }
  if (holders.length > 0) {
    const verdict = refused(`held by tag ${holders.join(', ')}`);
    if (!verdict.retry) blockingLeases.set(verdict.error, Math.max(...holders.flatMap((other) => liveEntries(lock, other, now).map((entry) => entry.exp.getTime()))));
    return verdict;
  }
  const upgrade = pendingUpgrade(lock, now);
  if (upgrade && rule.yieldsToUpgradesOf?.includes(upgrade.tag)) return refused(`a holder's upgrade to ${upgrade.tag} is pending (writer preference)`);
  const used = isLimited(rule) ? usedPermits(lock, rule.tag, now) : 0;
  const ahead = context.fair ? earlierTickets(lock, queuedBehind(rule), now, context.fair.ticket).length : 0;
  if (ahead > 0) return refused(`${ahead} waiter(s) came first (fair mode)`);
  const permits = context.permits ?? 1;
  if (isLimited(rule) && used + permits > rule.limit) return windowRefusal(refused(`${used} of ${rule.limit} permits of tag ${rule.tag} are ${context.window === undefined ? 'held' : `held or taken within the last ${context.window} ms`}, ${permits} asked`), lock, rule.tag, now, context.window);
  const latest = rule.exclusive || context.window !== undefined ? Math.max(0, ...(lock.recent?.[rule.tag] ?? []).map((date) => date.getTime())) : 0;
  if (latest > stamp) return laterStampVerdict(seen, latest, lockError(conflict, boom, { detail: 'held when the update ran' }));
  if (stampRefused(seen, stamp, tolerance)) return { retry: true, why: stampLag(seen, stamp, tolerance, context.lease) };
  const own = context.refusal?.(lock, now);
  if (own !== undefined) return refused(own);
  return { retry: false, error: refusedBy(lockError(conflict, boom, { detail: 'held when the update ran' }), seen.value._id), unfounded: true };
}

/** Refusals by held locks, explained by a read: when the last of the entries that refused ends (server ms), unless extended. */
const blockingLeases = new WeakMap<object, number>();

/** A rate limit's refusal: its waiter may try again once the first of the tag's live entries ends (a permit kept until its window passes ends without any write). */
function windowRefusal(verdict: Verdict, lock: StoredLock, tag: string, now: number, window: number | undefined): Verdict {
  const ends = liveEntries(lock, tag, now).map((entry) => entry.exp.getTime());
  if (window !== undefined && !verdict.retry && ends.length > 0) blockingLeases.set(verdict.error, Math.min(...ends));
  return verdict;
}

/**
 * When the leases of the entries that refused the acquisition `error` reports end (server ms, as
 * read by the explaining read), if known: a holder that crashed sends no change, so a waiter sleeps
 * no longer than this (its holder may have extended them since: the waiter's next refusal is explained again).
 */
export function blockingLeaseEnd(error: unknown): number | undefined {
  return typeof error === 'object' && error !== null ? blockingLeases.get(error) : undefined;
}

/** Refusals reported without the read that explains them (retries while waiting). */
const unexplainedRefusals = new WeakSet<object>();

/** The conflict of a refusal that was not explained by a read (see {@link isUnexplained}). */
export function unexplainedRefusal(error: Error): Error {
  unexplainedRefusals.add(error);
  return error;
}

/** True for a refusal reported without the read that would say why. */
export function isUnexplained(error: unknown): boolean {
  return typeof error === 'object' && error !== null && unexplainedRefusals.has(error);
}

/** Refusals of an owner's first hold that a fresh read may turn into a hold: the owner took the lock meanwhile, or the counter moved on. */
const ownerRetries = new WeakSet<object>();

/** True when an owner's refused first hold should read the document again and retry (as a nested hold if the owner holds it now). */
export function ownerMayRetry(error: unknown): boolean {
  return typeof error === 'object' && error !== null && ownerRetries.has(error);
}

/** What explains a write that needed a held lock. */
export interface LostContext {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** writeLock: a lost lock is `LockWasReacquired` when someone acquired after it. */
  readonly reportsReacquired: boolean;
  readonly boom: BoomLike | undefined;
  /** The write carried the caller's update (a commit, or an extension with an update). */
  readonly withUpdate?: boolean;
  /** The update came with the caller's `match`, which the document must also match. */
  readonly withMatch?: boolean;
}

/**
 * Explains why a write that needed `lock` matched nothing. If the lock is still live by the
 * server's clock, the write can only have failed on its stamp (retry), or, carrying an update, on
 * a tag it asserts over that is still held.
 */
export function explainLostLock(context: LostContext, seen: Inspection, lock: LockData, proof: Proof, stamp = 0, tolerance = 0, lease = 0): Verdict {
  const { paths, rule, boom, withUpdate = false } = context;
  if (!seen.value) return noDocument(boom);
  const stored = paths.read(seen.value);
  if ('timestamp' in proof && ambiguous(stored, lock.tag, proof.timestamp)) {
    const detail = `two locks of this document were taken in the ms ${proof.timestamp}, so a timestamp cannot tell them apart: use the handle (or its id)`;
    return { retry: false, error: lockError('LockNotFound', boom, { detail }) };
  }
  const own = (stored.tags?.[lock.tag] ?? []).find((entry) => matchesProof(entry, proof));
  const ownLive = own !== undefined && seen.serverNow !== undefined && liveEntries(stored, lock.tag, seen.serverNow.getTime()).includes(own);
  // A write with an update also needs the tags this lock asserts over gone; an expired lock is reported as expired first.
  if (ownLive && withUpdate) {
    const asserted = rule.assertive.filter((other) => undeadEntries(stored, other).length > 0);
    if (asserted.length > 0) {
      const detail = `the update was not applied: tag ${asserted.join(', ')}, which this lock asserts over, is still held (continue the acquisition first)`;
      return { retry: false, error: lockError('AssertiveLock', boom, { detail }) };
    }
  }
  // Live, asserting over nothing held, and not refused for its stamp: the document did not match the caller's `match`.
  if (ownLive && context.withMatch && !(stamp > 0 && stampRefused(seen, stamp, tolerance))) return { retry: false, error: noMatch(boom), unfounded: true };
  if (ownLive) return { retry: true, why: stampLag(seen, stamp, tolerance, lease) };
  // Reacquired: the document has issued a later lock than this one (its fence moved on). A lock
  // whose reply was lost has no known fence (0): nothing tells whether anyone acquired after it.
  const takenOver = !own && ('timestamp' in proof || (lock.fence > 0 && fenceOf(stored) > lock.fence));
  const subtype: LockErrorSubtype = context.reportsReacquired && takenOver ? 'LockWasReacquired' : 'LockNotFound';
  const gone = 'id' in proof && releasedHere(proof.id) ? 'the lock is not held: it was already released (an earlier release of this lock in this process succeeded)' : 'the lock is not held';
  const detail = `${own ? 'the lock expired' : gone}${withUpdate ? '; the update was not applied' : ''}`;
  return { retry: false, error: lockError(subtype, boom, { detail }) };
}

/** The refusal of a final write whose document did not match the caller's `match`. */
export function noMatch(boom: BoomLike | undefined): Error {
  return lockError('RessourceNotFound', boom, { detail: 'the document does not match params.match: nothing was written (the lock is still held)' });
}
