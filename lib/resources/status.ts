import type { Document } from 'mongodb';
import { NEVER } from '../protocol/lock-data';
import type { ResourceLockType } from './handle';
import type { StatusFilter } from './params';
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

/** The statuses of a resource document's locks at server time `now` (only the unexpired ones when `liveOnly`). */
export function statusesOf(paths: LockPaths, doc: Document | null, now: number, liveOnly = false): LockStatus[] {
  if (!doc) return [];
  const lock = paths.read(doc);
  return RESOURCE_TAGS.flatMap((tag) =>
    (liveOnly ? liveEntries(lock, tag, now) : (lock.tags?.[tag] ?? [])).map((entry): LockStatus => {
      const e = entry as StoredEntry & Document;
      const never = e.exp.getTime() >= NEVER;
      return {
        resource: String(doc._id),
        lockId: String(e.group),
        type: tag,
        owner: (e.owner as string | null) ?? null,
        host: (e.host as string | null) ?? null,
        comment: (e.comment as string | null) ?? null,
        createdAt: e.at,
        renewedAt: (e.renewedAt as Date | null) ?? null,
        expiresAt: never ? null : e.exp,
        ttl: never ? -1 : e.exp.getTime() - now,
      };
    }),
  );
}

/** The query that selects documents which may hold locks matching `filter`. */
export function statusQuery(paths: LockPaths, filter: StatusFilter): Document {
  const match: Document = filter.resource === undefined ? { ...RESOURCE_DOCUMENTS } : { _id: filter.resource };
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
