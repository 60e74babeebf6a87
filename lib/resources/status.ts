import type { Document } from 'mongodb';
import { withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { LockEngine } from '../engine/lock-engine';
import { NEVER } from '../protocol/lock-data';
import type { ServerClock } from '../protocol/server-clock';
import type { ResourceLockType } from './handle';
import { readStatusFilter, type StatusFilter } from './params';
import type { ResourceStore } from './resource-store';
import { liveEntries, type LockPaths, type StoredEntry } from '../protocol/stored-format';

export { RESOURCE_DOCUMENTS, RESOURCE_TAGS } from '../protocol/resource-document';
import { RESOURCE_DOCUMENTS, RESOURCE_TAGS } from '../protocol/resource-document';

/** A held lock as reported by `status`, `unlock` and `renew`. */
export interface LockStatus {
  readonly resource: string;
  readonly lockId: string;
  readonly type: ResourceLockType;
  readonly owner: string | null;
  readonly host: string | null;
  readonly comment: string | null;
  readonly createdAt: Date;
  readonly renewedAt: Date | null;
  /** null: no expiry. */
  readonly expiresAt: Date | null;
  /** Remaining lease in ms when read, by the server's clock (-1: no expiry). */
  readonly ttl: number;
}

/** One lock entry of a resource document, as stored: its status, its own id and whether it is live. */
export interface ResourceEntry {
  readonly status: LockStatus;
  /** The entry's own id: one acquisition (a later lock of the same lock id on the same resource is another entry). */
  readonly entryId: string;
  /** Unexpired at the server time it was judged at. */
  readonly live: boolean;
}

/** Every lock entry of a resource document, judged at server time `now` (ms). */
export function entriesOf(paths: LockPaths, doc: Document | null, now: number): ResourceEntry[] {
  if (!doc) return [];
  const lock = paths.read(doc);
  return RESOURCE_TAGS.flatMap((tag) => {
    const live = new Set(liveEntries(lock, tag, now));
    return (lock.tags?.[tag] ?? []).map((entry): ResourceEntry => {
      const e = entry as StoredEntry & Document;
      const never = e.exp.getTime() >= NEVER;
      const status: LockStatus = {
        resource: String(doc._id),
        lockId: String(e.group),
        type: tag,
        owner: (e.owner as string | null) ?? null,
        host: (e.host as string | null) ?? null,
        comment: (e.comment as string | null) ?? null,
        createdAt: e.at,
        renewedAt: (e.renewedAt as Date | null) ?? null,
        expiresAt: never ? null : e.exp,
        ttl: never ? -1 : Math.max(0, e.exp.getTime() - now),
      };
      return { status, entryId: e.id, live: live.has(entry) };
    });
  });
}

/** The statuses of a resource document's live locks at server time `now` (ms). */
export function liveStatusesOf(paths: LockPaths, doc: Document | null, now: number): LockStatus[] {
  return entriesOf(paths, doc, now).flatMap((entry) => (entry.live ? [entry.status] : []));
}

/**
 * The query that selects documents which may hold locks matching `filter`: with `liveAfter` (a
 * time at or below the server's clock that judges them), only those whose `lock.until`, the
 * latest expiry written there, is later, which the index on it serves.
 */
export function statusQuery(paths: LockPaths, filter: StatusFilter, liveAfter?: Date): Document {
  const match: Document = filter.resource === undefined ? { ...RESOURCE_DOCUMENTS } : { _id: filter.resource };
  if (liveAfter !== undefined) match[paths.until] = { $gt: liveAfter };
  const elem: Document = {
    ...(filter.lockId !== undefined ? { group: filter.lockId } : {}),
    ...(filter.owner !== undefined ? { owner: filter.owner } : {}),
  };
  if (Object.keys(elem).length > 0) match.$or = RESOURCE_TAGS.map((tag) => ({ [paths.tag(tag)]: { $elemMatch: elem } }));
  return match;
}

/** True when `status` passes every field of `filter`. */
export function statusMatches(status: LockStatus, filter: StatusFilter): boolean {
  return (
    (filter.lockId === undefined || status.lockId === filter.lockId) &&
    (filter.owner === undefined || status.owner === filter.owner) &&
    (filter.createdBefore === undefined || status.createdAt < filter.createdBefore) &&
    (filter.createdAfter === undefined || status.createdAt > filter.createdAfter) &&
    (filter.ttlBelow === undefined || (status.ttl >= 0 && status.ttl < filter.ttlBelow)) &&
    (filter.ttlAtLeast === undefined || status.ttl < 0 || status.ttl >= filter.ttlAtLeast)
  );
}

/** What `status` needs from the resource-lock client. */
export interface StatusSite {
  readonly store: ResourceStore;
  readonly engine: LockEngine;
  readonly clock: ServerClock;
  readonly paths: LockPaths;
  readonly defaults: ResolvedCallOptions;
}

/**
 * The live locks matching `filter`, oldest first, judged by the server's clock (`$$NOW`, read with
 * them). Reads only the resource documents whose `lock.until` is after the clock's stamp: the
 * stamp is at or below every clock that judges expiry, and a live entry's expiry (so its
 * document's `until`) is above that clock. A client that has not seen the deployment and the
 * server's clock yet learns them first (as before its first lock).
 */
export async function status(site: StatusSite, filter: unknown = {}): Promise<LockStatus[]> {
  const f = readStatusFilter(filter);
  const call = site.defaults;
  await site.engine.deployment.ready(call); // the skew between a cluster's clocks, which the stamp allows for
  if (!site.clock.synchronized) await site.engine.readClock({}, call);
  // Still unknown: the collection is empty (nothing to read, with or without a bound).
  const liveAfter = site.clock.synchronized ? new Date(site.clock.stamp()) : undefined;
  const { docs, serverNow } = await withDbErrors(call.boom, () => site.store.readAll(statusQuery(site.paths, f, liveAfter), call));
  const now = serverNow?.getTime() ?? site.clock.lower();
  return docs
    .flatMap((doc) => liveStatusesOf(site.paths, doc, now))
    .filter((held) => statusMatches(held, f))
    .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
}
