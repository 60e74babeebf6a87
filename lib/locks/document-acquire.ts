import type { Document } from 'mongodb';
import type { LockCallContext } from '../common/diagnostics';
import { isLockError, lockError } from '../common/errors';
import { type ResolvedCallOptions } from '../common/options';
import { expectDocumentOption, expectFilter, expectOwner, expectPermits } from '../common/validation';
import { expectMinHold } from '../common/min-hold-params';
import { acquireOwned } from '../engine/owned-acquisition';
import { contextOwner } from './owner-context';
import type { TagRule } from '../protocol/lock-data';
import type { Cancellation } from '../common/promise-library';
import { AssertivePending, lockWrittenBy, type Acquired } from '../engine/acquired';
import { isUnexplained } from '../engine/refusals';
import { neverSent } from '../engine/write-failures';
import type { LockEngine } from '../engine/lock-engine';
import type { ServerClock } from '../protocol/server-clock';
import type { LocalWaiters } from '../waiting/local-waiters';
import { linkSignals, readWaitParams, retryWithin } from '../waiting/wait-options';
import { WaitingPlace } from '../waiting/waiting-place';
import { Acquisition } from './acquisition';
import { Handle, type HandleOwner, type LockData } from './lock-handle';

/** While waiting, every how many refused attempts one is explained by a read (missing document, clock). */
const EXPLAIN_EVERY = 8;

/**
 * A params key (internal) for an attempt whose refusal needs no explaining: a group's attempt
 * without waiting, whose refusal it waits for next (and that wait explains its first refusal).
 */
export const UNEXPLAINED_REFUSAL = Symbol('monglock.unexplainedRefusal');

/**
 * A params key (internal) for fields stored in the new entry beside its id and times (an election's
 * `value`). Such an acquisition has no owner (it never re-enters) and is never handed over in a
 * release's write, which could not write its fields.
 */
export const ENTRY_FIELDS = Symbol('monglock.entryFields');

/** What an acquisition call needs from the lock it runs on (a {@link DocumentLock}). */
export interface AcquireSite extends HandleOwner {
  readonly engine: LockEngine;
  readonly clock: ServerClock;
  readonly waiters: LocalWaiters;
  /** The lock's default for fair waiting. */
  readonly fair: boolean;
  callOptions(params: unknown): { params: Record<string, unknown>; call: ResolvedCallOptions };
  leaseOf(tag: string, params: Record<string, unknown>): number;
  lockData(name: string, value: unknown): LockData;
  warnUncancellable(wait: number): void;
  releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void>;
}

/**
 * One acquisition call: takes a new lock of `tag` on the first document `filter` matches, or with
 * `lock` continues an assertive registration. Without `params.wait` it fails fast; with it,
 * conflicts (assertive continuations included) are retried with backoff, woken by releases in
 * this process, in FIFO order in fair mode, until the lock is won, `wait` ms pass, or the signal
 * or the promise's cancellation aborts. When it gives up, every lock it wrote is released (an
 * assertive registration too), also one written by an attempt in flight at that moment.
 */
export async function acquireOnDocument(
  site: AcquireSite,
  filter: unknown,
  tag: string | undefined,
  params: unknown,
  lock: unknown,
  cancellation: Cancellation | undefined,
  context: LockCallContext | undefined,
): Promise<Handle> {
  const userFilter = expectFilter('filter', filter);
  const { params: p, call } = site.callOptions(params);
  const resumed = lock === undefined ? undefined : resumable(site, userFilter, lock);
  const ruleTag = resumed?.lock.tag ?? tag ?? '';
  if (context) context.tag = ruleTag;
  const lease = site.leaseOf(ruleTag, p);
  const permits = resumed ? undefined : permitsOf(site.engine.rule(ruleTag), p);
  const entry = (p as Record<symbol, Document | undefined>)[ENTRY_FIELDS];
  const owner = resumed || entry ? undefined : ownerOf(site.engine.rule(ruleTag), p);
  const document = expectDocumentOption('params.document', p.document, site.engine.field);
  const minHold = minHoldOf(p, lease, resumed !== undefined, site.engine.rule(ruleTag).assertive.length > 0);
  const waiting = readWaitParams(p);
  const quiet = (p as Record<symbol, unknown>)[UNEXPLAINED_REFUSAL] === true;
  const { signal, dispose } = linkSignals(waiting.signal, cancellation?.signal);
  if (signal?.aborted) throw signal.reason;

  const acquisition = new Acquisition((written) => site.releaseWritten(written, call), site.clock, () => site.engine.readClock({}, call));
  const place = new WaitingPlace(site.engine, site.waiters, call, ruleTag, p.fair === undefined ? site.fair : p.fair === true);
  place.allowLooks(userFilter, owner !== undefined || resumed !== undefined);
  // When the wait ends (local ms): it bounds a look, the first sleep and the ticket's take (an attempt is bounded by `timeout`, and the last one explains).
  const waitEnds = performance.now() + waiting.wait;
  // A lock handed over is written by its holder's release, without a minimum hold or entry fields: a waiter that asks for one takes its lock itself.
  if (waiting.wait > 0 && !resumed && owner === undefined && permits === undefined && document === undefined && minHold === undefined && entry === undefined) {
    place.acceptHandOver(userFilter, { lease, w: call.w, fairness: () => place.fairness });
  }
  // An assertive lock registered by this call: continued on retries, released if we give up.
  let registered: Acquired | undefined;
  let attempts = 0;
  let lastAttempt = false;
  // While waiting, a refusal is explained (a second command) on the first try, every 8th, after a
  // local wake-up and on the last; the first needs none when a lock that blocks us is held in
  // this process (a conflict).
  const explains = (attempt: number): boolean =>
    !quiet && (lastAttempt || (attempt % EXPLAIN_EVERY === 0 && !(attempt === 0 && waiting.wait > 0 && place.refusalIsConflict)) || place.takeWakeUp());
  // One attempt: continues this call's assertive registration (or the caller's), or takes a lock, as the owner's when there is one; one still queued when the call is abandoned is not sent.
  const attemptCall = { ...call, abandoned: () => acquisition.abandoned };
  const send = (continuing: Acquired | undefined, explain: boolean): Promise<Acquired | AssertivePending> =>
    continuing
      ? site.engine.resume(continuing.target, continuing.lock, call, document)
      : owner
        ? acquireOwned(site.engine, userFilter, ruleTag, lease, attemptCall, { explain, document, fair: place.fairness, minHold }, owner)
        : site.engine.acquire(userFilter, ruleTag, lease, attemptCall, { explain, document, fair: place.fairness, permits, minHold, entry });
  // A refused attempt of a waiting call: it goes on waiting there (see WaitingPlace.refused).
  const refused = async (error: unknown): Promise<never> => {
    if (waiting.wait > 0 && isLockError(error, site.engine.conflict) && !acquisition.abandoned) {
      if (cancellation?.unsupported) site.warnUncancellable(waiting.wait);
      await place.refused(error, userFilter);
    }
    if (registered && isLockError(error, 'LockNotFound')) registered = undefined;
    const written = lockWrittenBy(error);
    if (written) (error as { lock: unknown }).lock = new Handle(written.lock, site, written.target, { unconfirmed: true, landsBy: written.landsBy });
    throw error;
  };
  // Registered, waiting for the locks it asserts over: the caller's to continue (carried by the error), or this call's, while it waits.
  const asserting = async (pending: AssertivePending, continuing: Acquired | undefined): Promise<never> => {
    if (!continuing) registered = pending;
    if (acquisition.abandoned && !continuing) {
      // Abandoned between the attempt's reply and here: the abandonment may not have seen it.
      await acquisition.abandon(undefined, pending);
      throw lockError('AssertiveLock', call.boom, { detail: 'abandoned; the registered lock was released' });
    }
    const carried = new Handle(pending.lock, site, pending.target, { document: pending.document });
    throw lockError('AssertiveLock', call.boom, { lock: carried, detail: `registered; waiting for tag ${pending.blockedBy.join(', ')}` });
  };
  const step = async (): Promise<Acquired> => {
    const continuing = registered ?? resumed;
    const explain = explains(attempts++);
    // Its turn, or a look at the fair queue: awaited only when there is one (nothing else is awaited on the way to the first attempt).
    const before = continuing ? undefined : place.beforeAttempt(signal, waitEnds, !lastAttempt);
    if (before) await before;
    // A release here may have handed this waiter the lock: its attempt is that hand-over (and, if none was made, its own, unless the call is being abandoned).
    const grant = continuing ? undefined : place.takeGrant();
    const abandoned = (): Promise<never> => Promise.reject(lockError(site.engine.conflict, call.boom, { detail: 'abandoned' }));
    let grantFailed = false;
    const handedOrSent = (handed: Acquired | undefined): Promise<Acquired | AssertivePending> => (handed ? Promise.resolve(handed) : acquisition.abandoned ? abandoned() : send(undefined, explain));
    let outcome: Acquired | AssertivePending;
    try {
      outcome = await acquisition.attempt(
        () => (grant ? grant.then(handedOrSent, (error: unknown) => ((grantFailed = true), Promise.reject(error))) : send(continuing, explain)),
        (won) => (won.lock.id === resumed?.lock.id ? undefined : won),
      );
    } catch (caught) {
      // A hand-over whose write failed: the lock it may have written is released once it can no longer land; this waiter waits on.
      return refused(grantFailed ? lockError(site.engine.conflict, call.boom, { detail: 'still held (a hand-over to this waiter failed)' }) : caught);
    }
    return outcome instanceof AssertivePending ? asserting(outcome, continuing) : outcome;
  };
  // An attempt that waited out its `timeout` in the client's queue was never sent: a congested client delays the wait, it does not fail it.
  const retryable = (error: unknown): boolean =>
    isLockError(error, site.engine.conflict) ||
    (waiting.wait > 0 && neverSent(error)) ||
    isLockError(error, 'AssertiveLock') ||
    (isLockError(error, 'LockNotFound') && resumed === undefined);
  let won: Acquired | undefined;
  try {
    // One turn before anything is sent, the same for every call: a signal aborted in the turn of
    // the call sends nothing, and callers that come together send in the order they came (the
    // first one's attempt before the later ones' tickets: nothing else is awaited on the way).
    await Promise.resolve();
    if (signal?.aborted) throw signal.reason;
    // An owner does not queue behind this process's waiters first: they may be waiting for its own lock, which it re-enters.
    const queued = waiting.wait > 0 && !resumed && !owner ? place.start(userFilter, waiting.wait) : undefined;
    if (queued) await acquisition.race(queued, signal, () => undefined);
    const attempt = (): Promise<Acquired> => acquisition.race(step(), signal, (outcome) => (outcome.lock.id === resumed?.lock.id ? undefined : outcome));
    // `wait` counts from the call: the time a ticket took to be taken above (bounded by a timer) is part of it.
    const left = Math.max(0, waitEnds - performance.now());
    won = await retryWithin({ wait: left, signal }, attempt, retryable, () => site.clock.local(), place.sleep).catch((error: unknown) => {
      // The wait ran out on a refusal nobody explained (while waiting, most are not): one last attempt says why (LimitMismatch, say), or wins.
      if (quiet || !isUnexplained(error) || signal?.aborted || acquisition.abandoned) throw error;
      lastAttempt = true;
      return attempt();
    });
    const handle = await handleFor(site, won, acquisition, call);
    if (context) {
      Object.assign(context, { lockId: handle.id, fence: handle.fence, expiresAt: handle.expiresAt });
      if (owner !== undefined) Object.assign(context, { owner, nested: won.nested === true });
      if (handle.permits !== undefined) context.permits = handle.permits;
    }
    return handle;
  } catch (error) {
    // Without waiting, an assertive registration is the caller's to continue (monglock v2).
    const handedOver = isLockError(error, 'AssertiveLock') && error.lock !== undefined && waiting.wait === 0 && !signal?.aborted;
    if (handedOver) throw error;
    await acquisition.abandon(error, registered);
    if (registered && isLockError(error, 'AssertiveLock')) {
      throw lockError('AssertiveLock', call.boom, { detail: `still asserting after waiting ${waiting.wait} ms; the registered lock was released` });
    }
    throw error;
  } finally {
    if (context) context.attempts = attempts;
    dispose();
    // A hand-over given to this waiter as it stopped waiting (aborted in its sleep): the lock it brings is released.
    const orphan = place.takeGrant();
    if (orphan) void acquisition.abandon(signal?.reason).then(() => acquisition.attempt(() => orphan, (handed) => handed)).catch(() => undefined);
    // A nested hold took no ticket out of the fair queue: its ticket (taken while it waited) is dropped.
    place.leave(won !== undefined && !won.nested);
  }
}

/** `params.permits`, validated against the tag's limit (undefined: the default, one). */
export function permitsOf(rule: TagRule, params: Record<string, unknown>): number | undefined {
  if (params.permits === undefined) return undefined;
  if (rule.limit === undefined) throw new TypeError(`Expected no \`params.permits\`: tag \`${rule.tag}\` has no limit (a multiLock declares one in \`options.limits\`)`);
  return expectPermits('params.permits', params.permits, rule.limit);
}

/** The owner of a reentrant acquisition: `params.owner`, else the context's ({@link withOwner}) unless the tag has a limit. */
export function ownerOf(rule: TagRule, params: Record<string, unknown>): string | undefined {
  if (params.owner === undefined) return rule.limit === undefined ? contextOwner() : undefined;
  if (rule.limit !== undefined) throw new TypeError(`Expected no \`params.owner\`: tag \`${rule.tag}\` has a limit, and its holders are counted by permits, not owned`);
  return expectOwner('params.owner', params.owner);
}

/** `params.minHold` (ms, 1 to the lease), refused when the call continues an assertive registration (its lock was taken already) or its tag is assertive over others. */
function minHoldOf(params: Record<string, unknown>, lease: number, resumed: boolean, assertive: boolean): number | undefined {
  if (resumed && params.minHold !== undefined) throw new TypeError('Expected no `params.minHold` with `params.lock`: the registration it continues was taken without one');
  // A registration that its caller gives back was never held: its minimum hold would refuse everyone for nothing.
  if (assertive && params.minHold !== undefined) throw new TypeError('Expected no `params.minHold` on a tag assertive over others: it may only register (AssertiveLock) before it holds, and a minimum hold is for a lock taken at once');
  return expectMinHold('params.minHold', params.minHold, lease);
}

/** A lock the caller passes back to continue, in the document its filter selects. */
function resumable(site: AcquireSite, filter: Document, lock: unknown): Acquired {
  return { lock: site.lockData('params.lock', lock), target: filter };
}

/**
 * The handle of a won lock, unless its reply came too late to be of use: if the upper bound
 * of the server's clock already passed its expiry, the server may have handed it to someone
 * else, so it is released and the acquisition fails.
 */
async function handleFor(site: AcquireSite, won: Acquired, acquisition: Acquisition, call: ResolvedCallOptions): Promise<Handle> {
  const handle = new Handle(won.lock, site, won.target, { document: won.document });
  if (handle.remaining() > 0) {
    site.waiters.acquired(won.target._id, won.lock.id, won.lock.tag, won.lock.expiresAt);
    return handle;
  }
  const late = lockError('DbError', call.boom, {
    detail: `the reply came after the lease (${site.clock.leaseOf(won.lock.timestamp, won.lock.expiresAt)} ms) had ended: the network or the server is slower than this lease allows`,
  });
  await acquisition.abandon(late, won);
  throw late;
}
