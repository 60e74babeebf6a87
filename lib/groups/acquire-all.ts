import { isLockError, lockError } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { readParams, type DocumentOption } from '../common/options';
import { expectDocumentOption, expectMs } from '../common/validation';
import { ownerOf, permitsOf, UNEXPLAINED_REFUSAL } from '../locks/document-acquire';
import { Handle } from '../locks/lock-handle';
import { newLockId } from '../protocol/lock-ids';
import { waitsFor } from '../protocol/lock-data';
import { firstWakeUp, Polling, type WakeUpSource } from '../waiting/wake-up-source';
import { readWaitParams, retryDelay } from '../waiting/wait-options';
import { locateMembers, readGroupRequests, type Located, type Member } from './group-request';
import { HandleGroup, ofRequest } from './lock-group';

/** Options of {@link acquireAll}, for the whole group (each lock's own `timeout`, `w` and `fair` apply to its member). */
export interface AcquireAllParams {
  /**
   * ms to keep trying while a document is held. The group never waits holding part of the set:
   * it releases what it holds, waits for the document that refused (the first one as that lock's
   * `acquire` waits; a later one until a release in this process or a random pause), then takes
   * the set again in canonical order. `0` fails fast.
   * @default 0
   */
  readonly wait?: number;
  /** Cancels the acquisition: it rejects with `signal.reason`, holding nothing (a lock an attempt in flight writes afterwards is released). */
  readonly signal?: AbortSignal;
  /** Lease of every member, in ms. @default each lock's lease */
  readonly locktimeout?: number;
  /** Return each locked document with its handle (`handle.document`): `true` all of it, or a projection. */
  readonly document?: DocumentOption;
}

export const ACQUIRE_ALL_KEYS = ['wait', 'signal', 'locktimeout', 'document'] as const;
export const GROUP_MISPLACED: Readonly<Record<string, string>> = {
  tag: 'each request names its own: `{ lock, filter, tag }`',
  owner: 'each request names its own: `{ lock, filter, owner }`',
  permits: 'each request names its own: `{ lock, filter, permits }`',
  timeout: "each lock's own `timeout` applies to its member",
  fair: "each lock's own `fair` option applies to its member",
};
const ACQUIRE_ALL = knownKeys<AcquireAllParams>()(ACQUIRE_ALL_KEYS, GROUP_MISPLACED);

/** While a group may wait, every how many refusals of one member one is explained by a read. */
const EXPLAIN_EVERY = 4;

/** A member that refused, and why. */
interface Refusal {
  readonly member: Located;
  readonly error: unknown;
}

/**
 * `acquireAll` (typed in group-api.ts). Locks several documents, all or nothing: resolves the handles in the order of `requests`, or
 * rejects holding nothing (every lock it took is released first; the error's `request` names the
 * request that refused or failed). Each request selects exactly one document; the documents are
 * locked in one canonical order (namespace, then `_id` in BSON order) whatever the order of
 * `requests`: first the first document alone, then the rest at once. It never waits while it holds
 * part of the set, so no deadlock is possible: on a refusal it releases what it holds, waits for
 * that document (holding nothing else: the first document is waited for as `acquire` waits, and
 * kept; a later one is not taken, but waited for until a release in this process or a random
 * pause longer each time), then takes the rest one by one in canonical order, within `params.wait`.
 * Holding only documents that come before the one it asks for, two groups never each hold what
 * the other asks for next (no livelock in step).
 * @example
 * const [from, to] = await acquireAll([{ lock: accounts, filter: { _id: 'a' } }, { lock: accounts, filter: { _id: 'b' } }], { wait: 5000 });
 */
export async function acquireGroup(requests: unknown, params?: unknown): Promise<HandleGroup> {
  const p = readParams('params', params, ACQUIRE_ALL);
  const members = readGroupRequests(requests);
  const asked = memberParams(members, p);
  const { wait, signal } = readWaitParams(p);
  if (signal?.aborted) throw signal.reason;
  const located = await abortable(
    locateMembers(members, (member) => member.core.callOptions({}).call),
    signal,
  );
  const started = performance.now();
  const left = (): number => wait - (performance.now() - started);
  // While the group may wait, a refusal is explained by a read (a missing document, say) only
  // every few refusals of a member, and on the last try; otherwise it is only a refusal.
  const refusals = new Map<Located, number>();
  let lastTry = false;
  const take = (member: Located, waitMs: number): Promise<Handle> => {
    const quiet = waitMs === 0 && wait > 0 && !lastTry && (refusals.get(member) ?? 0) % EXPLAIN_EVERY !== EXPLAIN_EVERY - 1;
    return member.core.acquire(member.target, member.tag, { ...asked.get(member.index), wait: waitMs, ...(signal && { signal }), ...(quiet && { [UNEXPLAINED_REFUSAL]: true }) });
  };
  const held = new Map<Located, Handle>();
  try {
    let refused = await takeTheRest(located, held, take, 'at once');
    // Once `wait` has run out, one last try, every refusal explained, says why, or wins.
    let overtime = false;
    let rounds = 0;
    while (refused) {
      refusals.set(refused.member, (refusals.get(refused.member) ?? 0) + 1);
      await releaseQuietly(held);
      if (signal?.aborted) throw signal.reason;
      if (wait === 0 || lastTry) throw refused.error;
      lastTry = overtime;
      rounds++;
      const { member } = refused;
      if (member === located[0]) {
        overtime = left() <= 0;
        // The first document: waited for (woken by releases in this process, FIFO for a fair lock) and kept.
        held.set(member, await take(member, Math.max(1, Math.ceil(left()))).catch((error: unknown) => Promise.reject(ofRequest(error, member.index, member.core.namespace))));
      } else {
        // Any other is waited for without taking it (a document held out of order could livelock
        // two groups): a random pause, longer each time, ended by its release in this process.
        await untilReleased(member, retryDelay(rounds), Math.max(0, left()), signal);
        overtime = left() <= 0;
      }
      refused = await takeTheRest(located, held, take, 'in order');
    }
  } catch (error) {
    await releaseQuietly(held);
    throw error;
  }
  const group = new HandleGroup(newLockId(), located.map((member) => ({ member, handle: held.get(member)! })));
  if (group.remaining() > 0) return group;
  await group.release().catch(() => undefined);
  throw lockError('DbError', located[0]!.core.callOptions({}).call.boom, {
    detail: 'a lease of the group ended before every member was held: the network or the server is slower than these leases allow; every member was released',
  });
}

/**
 * Takes the members not held yet, without waiting, in canonical order: `at once` (the first try)
 * takes the first alone when nothing is held (contenders for overlapping sets meet there, and
 * whoever loses holds nothing), then the rest at once; `in order` (after a refusal) one after the
 * other. Resolves the first refusal in canonical order (an assertive registration handed back is
 * released), or undefined once every member is held; rejects on any other failure.
 */
async function takeTheRest(
  located: readonly Located[],
  held: Map<Located, Handle>,
  take: (member: Located, wait: number) => Promise<Handle>,
  pace: 'at once' | 'in order',
): Promise<Refusal | undefined> {
  let pending = located.filter((member) => !held.has(member));
  while (pending.length > 0) {
    const batch = pace === 'in order' || held.size === 0 ? pending.slice(0, 1) : pending;
    const outcomes = await Promise.allSettled(batch.map((member) => take(member, 0)));
    let refusal: Refusal | undefined;
    let failure: Refusal | undefined;
    const registrations: Array<Promise<void>> = [];
    outcomes.forEach((outcome, i) => {
      const member = batch[i]!;
      if (outcome.status === 'fulfilled') return void held.set(member, outcome.value);
      let error = ofRequest(outcome.reason, member.index, member.core.namespace);
      const registered = isLockError(error, 'AssertiveLock') ? error.lock : undefined;
      if (registered instanceof Handle) {
        // The group gives its registration back: the error must not hand it over to be continued.
        registrations.push(registered.release().catch(() => undefined));
        const detail = 'the tags it asserts over are still held; the group released the lock it registered';
        error = ofRequest(lockError('AssertiveLock', member.core.callOptions({}).call.boom, { detail }), member.index, member.core.namespace);
      }
      if (isLockError(error, member.core.engine.conflict) || isLockError(error, 'AssertiveLock')) refusal ??= { member, error };
      else failure ??= { member, error };
    });
    await Promise.all(registrations);
    if (failure) throw failure.error;
    if (refusal) return refusal;
    pending = pending.filter((member) => !held.has(member));
  }
  return undefined;
}

/**
 * Sleeps `ms` (while a lock that blocks `member` is held in this process, until its release, up to
 * `HELD_HERE_SLEEP`), never past `left`, or until a release in this process lets `member`'s
 * document go; it only watches, and takes no wake-up from the waiters of that document.
 */
async function untilReleased(member: Located, ms: number, left: number, signal: AbortSignal | undefined): Promise<void> {
  const { waiters, engine } = member.core;
  const blockedBy = waitsFor(engine.rule(member.tag));
  const release: WakeUpSource = { listen: (_sleep, wake) => waiters.watch(member.id, blockedBy, wake) };
  await firstWakeUp([new Polling(() => waiters.heldHere(member.id, blockedBy)), release], { ms, left }, signal);
}

/** Releases every member held, at once, and forgets them; failures are left to the leases (the caller hears the failure that ended the acquisition). */
async function releaseQuietly(held: Map<Located, Handle>): Promise<void> {
  const handles = [...held.values()];
  held.clear();
  await Promise.all(handles.map((handle) => handle.release().catch(() => undefined)));
}

/**
 * The params each member is acquired with (the group's lease and document option, the request's
 * owner and permits), validated for every member before anything is read or written.
 */
function memberParams(members: readonly Member[], p: Record<string, unknown>): Map<number, Record<string, unknown>> {
  if (p.locktimeout !== undefined) expectMs('params.locktimeout', p.locktimeout);
  return new Map(
    members.map((member) => {
      const params: Record<string, unknown> = { ...member.extra };
      if (p.locktimeout !== undefined) params.locktimeout = p.locktimeout;
      if (p.document !== undefined) params.document = expectDocumentOption('params.document', p.document, member.core.engine.field);
      const rule = member.core.engine.rule(member.tag);
      try {
        permitsOf(rule, params);
        ownerOf(rule, params);
      } catch (error) {
        if (error instanceof Error) error.message = error.message.replaceAll('`params.', `\`requests[${member.index}].`);
        throw error;
      }
      return [member.index, params];
    }),
  );
}

/** `pending`, or a rejection with the signal's reason as soon as it aborts (a read that holds nothing). */
function abortable<T>(pending: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return pending;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    pending.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
