import type { Document } from 'mongodb';
import { lockError, withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { conversionBlockedBy, conversionWaitsFor, convertOperation, dropUpgradeOperation, markUpgradeOperation, pendingUpgrade } from '../protocol/convert';
import { fenceOf, type LockData } from '../protocol/lock-data';
import { liveEntries, type StoredLock } from '../protocol/stored-format';
import type { TagRule } from '../protocol/lock-data';
import { isLimited, limitMismatch, usedPermits } from '../protocol/permits';
import { landing, type Acquired } from './acquired';
import type { LockEngine } from './lock-engine';
import { explainLostLock } from './refusals';
import { stampRefused, type Verdict } from './stamp-refusals';
import { observeWrite } from './stamped-write';
import type { Inspection, Timed } from './store';
import { classifyWriteFailure, describeWriteFailure } from './write-failures';
import { quarantinedVerdict } from './quarantined';

/**
 * Converts `lock` to `tag` ({@link convertOperation}): resolves the lock with its new tag, token
 * and expiry, in its document. Rejects with the engine's conflict while other locks that the new
 * tag waits for are held; `UpgradeConflict` when waiting would deadlock (another holder's pending
 * upgrade waits for this lock); `LockNotFound` when the lock was lost.
 */
export async function convertLock(engine: LockEngine, target: Document, lock: LockData, tag: string, lease: number, call: ResolvedCallOptions): Promise<Acquired> {
  const { paths, store, clock } = engine;
  const from = engine.rule(lock.tag);
  const to = engine.rule(tag);
  // A pending upgrade to a tag that waits for `to` but not for `from` would be held up by this conversion.
  const yieldsToUpgradesOf = (to.yieldsToUpgradesOf ?? []).filter((other) => !conversionBlockedBy(engine.rule(other)).includes(from.tag));
  return engine.stamped(call, {
    target,
    lease,
    write: async (stamp, tolerance) => {
      const entry = { id: lock.id, at: new Date(stamp), exp: new Date(engine.clock.expiry(stamp, lease)) };
      const operation = convertOperation({ paths, from, to, tags: engine.tags, target, entry, tolerance, yieldsToUpgradesOf });
      let reply: Timed<Document | null>;
      try {
        reply = await store.apply(operation, call, call.w);
      } catch (error) {
        throw mayHaveConverted(error, { tag, timestamp: stamp, expiresAt: entry.exp.getTime(), landsBy: landing(stamp, tolerance, call).landsBy }, call);
      }
      if (!reply.value) return undefined;
      const appliedAt = observeWrite({ paths, clock }, reply.value, reply);
      const converted: LockData = { id: lock.id, tag, timestamp: stamp, fence: fenceOf(paths.read(reply.value)), expiresAt: entry.exp.getTime(), ...(to.limit !== undefined && { permits: 1 }) };
      const acquired = { lock: converted, target: engine.deployment.addressOf(reply.value), appliedAt };
      await engine.deployment.refuseSkewed(call).catch((error: unknown) => Promise.reject(landedWith(error, acquired)));
      return acquired;
    },
    explain: (seen, stamp, tolerance) =>
      foundConverted(engine, seen, lock, tag, call) ??
      explainRefusedConversion(engine, seen, lock, tag, yieldsToUpgradesOf, call, stamp, tolerance) ??
      explainLostLock({ paths, rule: from, reportsReacquired: false, boom: call.boom }, seen, lock, { id: lock.id }, stamp, tolerance, lease),
  });
}

/**
 * A conversion whose reply was lost, as it left the lock if it landed: under `tag`, stamped
 * `timestamp`, its lease ending at `expiresAt`; it can land until `landsBy` (server time).
 */
export interface MaybeConverted {
  readonly tag: string;
  readonly timestamp: number;
  readonly expiresAt: number;
  readonly landsBy: number;
}

/** Failures of a conversion's write whose reply was lost: it may have landed (what it made of the lock if it did). */
const maybeConverted = new WeakMap<object, MaybeConverted>();
/** Failures of a conversion that landed: the lock as it now is. */
const landed = new WeakMap<object, Acquired>();

/** What a failed conversion made of its lock if it landed (its reply was lost), if it may have. */
export function conversionMayHaveLanded(error: unknown): MaybeConverted | undefined {
  return typeof error === 'object' && error !== null ? maybeConverted.get(error) : undefined;
}

/** The lock a failed conversion did move (it landed, but the call failed after, or its reply had been lost), if it did. */
export function conversionLanded(error: unknown): Acquired | undefined {
  return typeof error === 'object' && error !== null ? landed.get(error) : undefined;
}

/** The error of a conversion's write that failed: a `DbError` that says whether it may have landed ({@link conversionMayHaveLanded}). */
function mayHaveConverted(error: unknown, maybe: MaybeConverted, call: ResolvedCallOptions): Error {
  const { tag } = maybe;
  const failure = classifyWriteFailure(error);
  const message = error instanceof Error ? error.message : String(error);
  const detail = `${message} (${failure === 'unknown' ? `the conversion to ${tag} may have landed: the handle's release looks for the lock under both tags` : describeWriteFailure(failure, 'conversion')})`;
  const failed = lockError('DbError', call.boom, { cause: error, detail });
  if (failure === 'unknown') maybeConverted.set(failed, maybe);
  return failed;
}

/** `error`, recorded as the failure of a conversion that landed as `acquired`. */
function landedWith(error: unknown, acquired: Acquired): unknown {
  if (typeof error === 'object' && error !== null) landed.set(error, acquired);
  return error;
}

/**
 * When the document shows `lock` live under `tag` already, a conversion whose reply was lost had
 * landed: a `DbError` that says so, with the lock as it is ({@link conversionLanded}; its fencing
 * token is not known: the conversion's was not read back, and the document's counter may have
 * moved on since).
 */
function foundConverted(engine: LockEngine, seen: Inspection, lock: LockData, tag: string, call: ResolvedCallOptions): Verdict | undefined {
  if (!seen.value) return undefined;
  const now = seen.serverNow?.getTime() ?? 0;
  const entry = liveEntries(engine.paths.read(seen.value), tag, now).find((each) => each.id === lock.id);
  if (!entry) return undefined;
  const detail = `the conversion to ${tag} had landed, but its reply was lost: the lock is a ${tag} lock now (its new fencing token is not known: the handle keeps the one it had)`;
  const moved: LockData = { id: lock.id, tag, timestamp: entry.at.getTime(), fence: lock.fence, expiresAt: entry.exp.getTime(), ...(entry.permits !== undefined && { permits: entry.permits }) };
  return { retry: false, error: landedWith(lockError('DbError', call.boom, { detail }), { lock: moved, target: engine.deployment.addressOf(seen.value), appliedAt: now }) as Error };
}

/** Why a conversion of a live lock was refused: the locks its new tag waits for, or an upgrade it may not wait behind; undefined: the lock itself (see explainLostLock). */
function explainRefusedConversion(
  engine: LockEngine,
  seen: Inspection,
  lock: LockData,
  tag: string,
  yieldsTo: readonly string[],
  call: ResolvedCallOptions,
  stamp: number,
  tolerance: number,
): Verdict | undefined {
  if (!seen.value) return undefined;
  const stored = engine.paths.read(seen.value);
  const now = seen.serverNow?.getTime() ?? 0;
  if (!liveEntries(stored, lock.tag, now).some((entry) => entry.id === lock.id)) return undefined;
  const quarantined = quarantinedVerdict(stored, now, call.boom, seen.value._id);
  if (quarantined) return quarantined;
  const to = engine.rule(tag);
  const deadlock = upgradeWaitingFor(engine, stored, lock, to, now);
  if (deadlock) return { retry: false, error: deadlock(call) };
  const mismatch = limitMismatch(stored, to, now);
  if (mismatch !== undefined) return { retry: false, error: lockError('LimitMismatch', call.boom, { detail: mismatch }) };
  const held = conversionWaitsFor(to).filter((other) => liveEntries(stored, other, now).some((entry) => entry.id !== lock.id));
  // A registration of a tag this conversion waits for, itself waiting for this lock's tag (assertive): each would wait for the other.
  const registered = held.find((other) => engine.rule(other).assertive.includes(lock.tag));
  if (registered !== undefined) {
    const detail = `a ${registered} lock registered beside this ${lock.tag} lock waits for it (assertive), and this conversion would wait for it: release this lock, or retry once it is done`;
    return { retry: false, error: lockError('UpgradeConflict', call.boom, { detail }) };
  }
  const pending = pendingUpgrade(stored, now);
  if (held.length > 0) return { retry: false, error: lockError(engine.conflict, call.boom, { detail: `tag ${held.join(', ')} is held by others` }) };
  if (pending && pending.id !== lock.id && yieldsTo.includes(pending.tag)) {
    return { retry: false, error: lockError(engine.conflict, call.boom, { detail: `another holder's upgrade to ${pending.tag} is pending` }) };
  }
  const used = isLimited(to) ? usedPermits(stored, tag, now) : 0;
  if (isLimited(to) && used + 1 > to.limit) return { retry: false, error: lockError(engine.conflict, call.boom, { detail: `${used} of ${to.limit} permits of tag ${tag} are held` }) };
  const latest = to.exclusive ? Math.max(0, ...(stored.recent?.[tag] ?? []).map((date) => date.getTime())) : 0;
  // Stamped behind a later acquisition: again with a later stamp; if that keeps happening, a conflict (waited for with `wait`).
  if (latest > stamp) return { retry: true, why: 'a later acquisition was stamped meanwhile', minStamp: latest, error: lockError(engine.conflict, call.boom, { detail: 'held when the update ran' }) };
  if (stampRefused(seen, stamp, tolerance)) return undefined; // explainLostLock: try again with a fresh stamp
  // A lock the new tag waits for (a registration, say) came and went between the update and this read.
  return { retry: false, error: lockError(engine.conflict, call.boom, { detail: 'held when the update ran' }) };
}

/**
 * When another holder's pending upgrade waits for `lock` and this conversion to `to` would wait
 * for that holder's lock: the error that says so (each would wait for the other).
 */
function upgradeWaitingFor(engine: LockEngine, stored: StoredLock, lock: LockData, to: TagRule, now: number): ((call: ResolvedCallOptions) => Error) | undefined {
  const pending = pendingUpgrade(stored, now);
  if (!pending || pending.id === lock.id || !conversionBlockedBy(engine.rule(pending.tag)).includes(lock.tag)) return undefined;
  const upgraderTag = [...engine.tags].find((other) => liveEntries(stored, other, now).some((entry) => entry.id === pending.id));
  if (upgraderTag === undefined || !conversionBlockedBy(to).includes(upgraderTag)) return undefined;
  return (call) =>
    lockError('UpgradeConflict', call.boom, {
      detail: `another holder's upgrade to ${pending.tag} is pending and waits for this ${lock.tag} lock: two upgrades would wait for each other, so this one is refused (release this lock, or retry once that upgrade is done)`,
    });
}

/**
 * Marks (or renews) the pending upgrade of `lock` to `tag` for `lease` ms ({@link markUpgradeOperation}).
 * Resolves false when another holder's upgrade is pending (at most one per document: this one
 * waits unmarked); rejects with `LockNotFound` when the lock was lost.
 */
export async function markUpgrade(engine: LockEngine, target: Document, lock: LockData, tag: string, lease: number, call: ResolvedCallOptions): Promise<boolean> {
  const { paths, store, clock } = engine;
  return engine.stamped(call, {
    target,
    lease,
    write: async (stamp, tolerance) => {
      const mark = { id: lock.id, tag, exp: new Date(clock.expiry(stamp, lease)) };
      const reply = await store.apply(markUpgradeOperation(paths, target, lock.tag, mark, new Date(stamp), tolerance), call, call.w);
      if (!reply.value) return undefined;
      observeWrite({ paths, clock }, reply.value, reply);
      return true;
    },
    explain: (seen, stamp, tolerance) => {
      const stored = seen.value ? paths.read(seen.value) : {};
      const pending = pendingUpgrade(stored, seen.serverNow?.getTime() ?? 0);
      const lost = explainLostLock({ paths, rule: engine.rule(lock.tag), reportsReacquired: false, boom: call.boom }, seen, lock, { id: lock.id }, stamp, tolerance, lease);
      if (lost.retry && pending && pending.id !== lock.id) return { retry: false, error: OTHER_MARK };
      return lost;
    },
  }).catch((error: unknown) => {
    if (error === OTHER_MARK) return false;
    throw error;
  });
}

/** Another holder's mark is live: this conversion waits without one. */
const OTHER_MARK = new Error('another holder\'s upgrade is pending');

/** Drops `lock`'s pending upgrade (a conversion that gave up); a failure leaves it to expire. */
export async function dropUpgrade(engine: LockEngine, target: Document, lock: LockData, call: ResolvedCallOptions): Promise<void> {
  await withDbErrors(call.boom, () => engine.store.applyOne(dropUpgradeOperation(engine.paths, target, lock.id), call, call.releaseW)).catch(() => undefined);
}
