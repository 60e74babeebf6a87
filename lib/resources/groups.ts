import type { Document } from 'mongodb';
import { isLockError, lockError, withDbErrors, type BoomLike } from '../common/errors';
import { classifyWriteFailure, describeWriteFailure } from '../engine/write-failures';
import { withPriority, type ResolvedCallOptions } from '../common/options';
import { expectFunction, expectMs } from '../common/validation';
import type { LockEngine } from '../engine/lock-engine';
import { extensionOf, Handle, type LockData } from '../locks/lock-handle';
import { fenceOf } from '../protocol/lock-data';
import { RESOURCE_DOCUMENTS, RESOURCE_TAGS, unlockOperation } from '../protocol/resource-document';
import type { ServerClock } from '../protocol/server-clock';
import type { LockPaths, StoredEntry } from '../protocol/stored-format';
import type { ResourceHandle } from './handle';
import { expectLockId } from './params';
import { purgeExpired, repeatPurge, type PurgeOutcome } from './purge';
import type { ResourceStore } from './resource-store';
import { liveStatusesOf, status, type LockStatus } from './status';
import { keptId, releaseKeepsEntry } from '../protocol/min-hold';
import { expectLeaseCoversMinHold } from '../common/min-hold-params';

/** The `_id` of the document the clock is read from: an object, so never a resource's name. */
const CLOCK_DOCUMENT = { monglock: 'clock' };

/** What the collection-wide calls need from the resource-lock client. */
export interface ResourceSite {
  readonly store: ResourceStore;
  readonly engine: LockEngine;
  readonly clock: ServerClock;
  readonly paths: LockPaths;
  readonly defaults: ResolvedCallOptions;
  /** Handles kept alive by `using()`, by lock id: `renew` tells them their new expiry. */
  readonly kept: ReadonlyMap<string, ResourceHandle>;
  /** What renewing a lock of `tag` also writes. */
  renewal(tag: string): (at: Date, exp: Date) => Document;
}

/*
 * The calls that work on lock groups (every lock of one lock id, square/mongo-lock's model) and
 * on the whole collection: unlock, renew, status, purge, createIndexes.
 */

/** The indexes resource locks use: lookups by lock id, owner and expiry, `lock.until` for status, and a TTL index on `gcAt`. */
export async function createIndexes(site: ResourceSite): Promise<string[]> {
  const indexes: Array<{ key: Document; name: string; expireAfterSeconds?: number; partialFilterExpression?: Document }> = [];
  for (const tag of RESOURCE_TAGS) {
    for (const field of ['group', 'owner', 'exp']) {
      indexes.push({ key: { [`${site.paths.tag(tag)}.${field}`]: 1 }, name: `${tag}_${field}` });
    }
  }
  // status reads by it; partial: only documents that ever held a lock (it implies their `$gt` on a date).
  // Named as mongod names the index `monglock status` suggests, so that either may come first (mongod refuses one index under two names).
  indexes.push({ key: { [site.paths.until]: 1 }, name: `${site.paths.until}_1`, partialFilterExpression: { [site.paths.until]: { $exists: true } } });
  indexes.push({ key: { gcAt: 1 }, name: 'gc_ttl', expireAfterSeconds: 0 });
  return withDbErrors(site.defaults.boom, () => site.store.createIndexes(indexes, site.defaults));
}

/** Unlocks every lock of `lockId` (a lock group); resolves those that were live (an expired one had ended already), newest first. */
export async function unlock(site: ResourceSite, lockId: unknown): Promise<LockStatus[]> {
  const group = expectLockId('lockId', lockId);
  // A release: its commands leave the client's queue of lock commands with releases, before attempts.
  const call = withPriority(site.defaults, 'release');
  const { docs, serverNow } = await withDbErrors(call.boom, () => site.store.readAll(groupFilter(site, group), call));
  const now = serverNow?.getTime() ?? site.clock.lower();
  const released = await Promise.all(
    docs.map(async (doc) => {
      // A lock of the group taken with minHold, whose minimum hold may not have ended: released as its handle releases it (kept, its group renamed, until that end), not removed.
      const kept = withMinHold(site, doc, group, now);
      for (const { tag, entry, hold } of kept) {
        await site.engine.release({ _id: doc._id }, tag, { id: entry.id }, { ...dataOf(site, tag, entry, doc), minHoldUntil: hold }, call, { keptFields: { group: keptId(group) } }).catch((error: unknown) => {
          if (!isLockError(error, 'LockNotFound') && !isLockError(error, 'LockWasReacquired')) throw error; // gone meanwhile: nothing to release
        });
      }
      const before = await withDbErrors(call.boom, () => site.store.updateReturningBefore(unlockOperation(site.paths, { _id: doc._id }, group), call));
      const keptIds = new Set(kept.map(({ entry }) => entry.id));
      const keptStatuses = keptIds.size === 0 ? [] : liveStatusesOf(site.paths, onlyEntries(site.paths, doc, keptIds), now);
      return [...keptStatuses, ...liveStatusesOf(site.paths, before, now)].filter((released) => released.lockId === group);
    }),
  );
  return released.flat().sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime());
}

/**
 * Renews every lock of `lockId` to `ttl` ms; all, or a rejection naming what failed
 * ({@link renewalFailure}: `LockNotFound` for a lost lock, `DbError` for an unknown outcome).
 */
export async function renew(site: ResourceSite, lockId: unknown, ttl: unknown): Promise<LockStatus[]> {
  const group = expectLockId('lockId', lockId);
  const lease = expectMs('ttl', ttl);
  // An extension: its read of the group leaves the client's queue of lock commands with extensions, before attempts.
  const call = withPriority(site.defaults, 'extend');
  const { docs, serverNow } = await withDbErrors(call.boom, () => site.store.readAll(groupFilter(site, group), call));
  const held = docs.flatMap((doc) =>
    RESOURCE_TAGS.flatMap((tag) =>
      (site.paths.read(doc).tags?.[tag] ?? []).filter((e) => (e as StoredEntry & Document).group === group).map((entry) => ({ doc, tag, entry })),
    ),
  );
  if (held.length === 0) throw lockError('LockNotFound', call.boom, { detail: `no lock with lockId ${group}`, data: { lockId: group } });
  const now = serverNow?.getTime() ?? site.clock.lower();
  const expired = held.filter(({ entry }) => entry.exp.getTime() <= now).map(({ doc, tag }) => `${String(doc._id)} (${tag})`);
  if (expired.length > 0) {
    throw lockError('LockNotFound', call.boom, { detail: `lockId ${group} has expired locks: ${expired.join(', ')}`, data: { lockId: group, expired } });
  }
  // A lock taken with minHold: a shorter ttl could end it before its minimum hold (as a handle's extension, refused before anything is written).
  for (const { entry } of held) {
    if (entry.hold instanceof Date) expectLeaseCoversMinHold(lease, { timestamp: entry.at.getTime(), minHoldUntil: entry.hold.getTime() }, (stamp, end) => site.clock.leaseOf(stamp, end));
  }
  const outcomes = await Promise.allSettled(
    held.map(async ({ doc, tag, entry }) => {
      const renewed = await site.engine.extend({ _id: doc._id }, dataOf(site, tag, entry, doc), { id: entry.id }, lease, call, site.renewal(tag));
      const handle = site.kept.get(entry.id);
      if (handle) Handle.updateExpiry(handle, extensionOf(renewed));
    }),
  );
  const failures = outcomes.flatMap((outcome, i) => (outcome.status === 'rejected' ? [{ what: `${String(held[i]!.doc._id)} (${held[i]!.tag})`, error: outcome.reason as unknown }] : []));
  if (failures.length > 0) throw renewalFailure(group, failures, call.boom);
  return status(site, { lockId: group });
}

/** Removes expired locks, then deletes resource documents that hold none (see {@link purgeExpired}). */
export async function purge(site: ResourceSite): Promise<PurgeOutcome> {
  const call = site.defaults;
  const reply = await withDbErrors(call.boom, () => site.store.serverTime(CLOCK_DOCUMENT, call));
  site.clock.observe(reply.value, reply.sentAt, reply.arrivedAt);
  // Judged at a stamp (the server's clock less the skew between clocks): an entry it removes has expired on every clock.
  return withDbErrors(call.boom, () => purgeExpired(site.store, site.paths, new Date(Math.min(site.clock.stamp(), reply.value.getTime())), call));
}

/** Runs {@link purge} every `intervalMs`, one run at a time ({@link repeatPurge}). */
export function purgeEvery(site: ResourceSite, intervalMs: unknown, onError: unknown): { stop(): Promise<void> } {
  const every = expectMs('intervalMs', intervalMs);
  const report = onError === undefined ? () => undefined : expectFunction<(error: unknown) => void>('onError', onError);
  return repeatPurge(() => purge(site), every, report);
}

/**
 * The rejection of a renewal of which some locks failed. A lock refused as gone (`LockNotFound`,
 * `RessourceNotFound`) makes it `LockNotFound`, naming them in `data.lost`. Otherwise it is
 * `DbError`, never a lost lock: `data.unknown` names the renewals that may have landed (a lost
 * reply, as a handle's `extend()` reports it), `data.failed` those that surely wrote nothing.
 */
function renewalFailure(group: string, failures: Array<{ what: string; error: unknown }>, boom: BoomLike | undefined): Error {
  const outcomes = failures.map(({ what, error }) => {
    if (isLockError(error) && error.subtype !== 'DbError') return { what, error, outcome: 'lost' as const };
    const failure = classifyWriteFailure(isLockError(error) ? (error as Error).cause : error);
    return { what, error, outcome: failure === 'unknown' ? ('unknown' as const) : ('failed' as const), why: describeWriteFailure(failure, 'renewal') };
  });
  const named = (outcome: string): string[] => outcomes.filter((o) => o.outcome === outcome).map((o) => o.what);
  const data = { lockId: group, lost: named('lost'), unknown: named('unknown'), failed: named('failed') };
  const dbFailures = outcomes.filter((o) => o.outcome !== 'lost');
  const cause = dbFailures[0]?.error;
  const explained = dbFailures.map((o) => `${o.what}: ${o.error instanceof Error ? o.error.message : String(o.error)} (${o.why})`).join('; ');
  if (data.lost.length > 0) {
    const also = explained ? `; and failed: ${explained}` : '';
    return lockError('LockNotFound', boom, { detail: `lockId ${group} lost locks while renewing: ${data.lost.join(', ')}${also}`, data, cause });
  }
  return lockError('DbError', boom, { detail: `lockId ${group}: renewing failed for ${explained}`, data, cause });
}

function groupFilter(site: ResourceSite, group: string): Document {
  return { ...RESOURCE_DOCUMENTS, $or: RESOURCE_TAGS.map((tag) => ({ [`${site.paths.tag(tag)}.group`]: group })) };
}

function dataOf(site: ResourceSite, tag: string, entry: StoredEntry, doc: Document): LockData {
  return { id: entry.id, tag, timestamp: entry.at.getTime(), fence: fenceOf(site.paths.read(doc)), expiresAt: entry.exp.getTime(), ...(entry.hold instanceof Date && { minHoldUntil: entry.hold.getTime() }) };
}

/** The live entries of `group` in `doc` taken with minHold whose minimum hold may not have ended (by the lower bound of the server's clock): an unlock keeps them. */
function withMinHold(site: ResourceSite, doc: Document, group: string, now: number): Array<{ tag: string; entry: StoredEntry; hold: number }> {
  const lock = site.paths.read(doc);
  return RESOURCE_TAGS.flatMap((tag) =>
    (lock.tags?.[tag] ?? []).flatMap((entry) => {
      const hold = entry.hold instanceof Date ? entry.hold.getTime() : undefined;
      return (entry as StoredEntry & Document).group === group && entry.exp.getTime() > now && releaseKeepsEntry(hold) ? [{ tag, entry, hold }] : [];
    }),
  );
}

/** `doc` with only the entries whose ids are in `ids` (what an unlock reports of the entries it kept). */
function onlyEntries(paths: LockPaths, doc: Document, ids: ReadonlySet<string>): Document {
  const lock = paths.read(doc);
  const tags = Object.fromEntries(Object.entries(lock.tags ?? {}).map(([tag, entries]) => [tag, (entries ?? []).filter((entry) => ids.has(entry.id))]));
  return { ...doc, [paths.field]: { ...lock, tags } };
}
