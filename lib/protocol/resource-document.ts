import type { Document } from 'mongodb';
import { NEVER } from './lock-data';
import type { LockOperation } from './operation';
import { noLiveEntry, pruneTags, type LockPaths, type StoredEntry, type StoredLock } from './stored-format';

/**
 * Resource locks (square/mongo-lock's model): each resource is a document `{ _id: name, lock,
 * gcAt }` in the lock collection, with the tags `exclusive` (cooperative with both) and `shared`
 * (cooperative with `exclusive`, at most `maxConcurrent` holders, one per lock id). These are the
 * operations that resource locks add to the protocol's acquire, extend and release.
 */
export const RESOURCE_TAGS = ['exclusive', 'shared'] as const;
/** The field of a resource document that holds its locks (fixed for resource locks). */
export const RESOURCE_FIELD = 'lock';

/** Resource documents (`_id` a string), never the clock's meta document. */
export const RESOURCE_DOCUMENTS: Document = { _id: { $type: 'string' } };

/**
 * Create a resource document unless it exists, with its birth time from the server's clock
 * (`$currentDate`): its fencing tokens start there, so a purged and re-created resource keeps
 * counting upwards. Sent as an upsert; MongoDB's unique `_id` makes two documents impossible.
 */
export function createResourceOperation(paths: LockPaths, resource: string, gcAt: Date): LockOperation {
  const birth = birthOperation(paths, { _id: resource });
  return { filter: birth.filter, update: { ...birth.update, $setOnInsert: { gcAt } } };
}

/**
 * Create the document `target` names (by `_id`, and its shard key) unless it exists, with a birth
 * time from the server's clock; a document that exists without one gets it (its tokens then jump
 * above every one it issued). Sent as an upsert: an existing document with a birth time makes it a
 * duplicate `_id`, which says it exists. Elections and resource locks create their documents so.
 */
export function birthOperation(paths: LockPaths, target: Document): LockOperation {
  return { filter: { ...target, [paths.born]: { $exists: false } }, update: { $currentDate: { [paths.born]: true } } };
}

/**
 * What a shared acquisition also checks, at the stamp: the lock id holds no live shared entry
 * here yet, and (with a limit) fewer than `limit` shared entries are live.
 */
export function sharedConditions(paths: LockPaths, group: string, limit: number, at: Date): Document[] {
  const sharedPath = paths.tag('shared');
  const conditions: Document[] = [{ [sharedPath]: { $not: { $elemMatch: { group, exp: { $gt: at } } } } }];
  if (limit >= 0) {
    const live = { $filter: { input: { $ifNull: [`$${sharedPath}`, []] }, as: 'entry', cond: { $gt: ['$$entry.exp', at] } } };
    conditions.push({ $expr: { $lt: [{ $size: live }, limit] } });
  }
  return conditions;
}

/** Why the shared conditions refuse `lock` at server time `now` (ms), if they do. */
export function sharedRefusal(lock: StoredLock, group: string, limit: number, now: number): string | undefined {
  const live = (lock.tags?.shared ?? []).filter((entry) => entry.exp.getTime() > now);
  if (live.some((entry) => (entry as StoredEntry & Document).group === group)) return `lock id ${group} already holds a shared lock here`;
  if (limit >= 0 && live.length >= limit) return `${live.length} shared holders, the most allowed (maxConcurrent ${limit})`;
  return undefined;
}

/** The date after which an abandoned resource document may be deleted: `gcAfter` ms past `exp`. */
export function gcDateOf(exp: Date, gcAfter: number): Date {
  return new Date(Math.min(NEVER, exp.getTime() + gcAfter));
}

/** What an acquisition of a resource also writes: the later GC date. */
export function acquisitionExtra(gcAt: Date): Document {
  return { $max: { gcAt } };
}

/** What renewing a lock of `tag` also writes: its renewal time, and the later GC date. */
export function renewalExtra(paths: LockPaths, tag: string, at: Date, gcAt: Date): Document {
  return { $set: { [`${paths.tag(tag)}.$[mine].renewedAt`]: at }, $max: { gcAt } };
}

/** Unlock: removes every lock of the lock id `group` from one resource document. It only frees locks. */
export function unlockOperation(paths: LockPaths, target: Document, group: string): LockOperation {
  return { filter: target, update: { $pull: Object.fromEntries(RESOURCE_TAGS.map((tag) => [paths.tag(tag), { group }])) } };
}

/** Purge, first step: removes from every resource document the locks that expired by `serverNow` (a time the server's clock has reached). */
export function pruneExpiredOperation(paths: LockPaths, serverNow: Date): LockOperation {
  const expiredSomewhere = { $or: RESOURCE_TAGS.map((tag) => ({ [`${paths.tag(tag)}.exp`]: { $lte: serverNow } })) };
  return { filter: { ...RESOURCE_DOCUMENTS, ...expiredSomewhere }, update: { $pull: pruneTags(paths, RESOURCE_TAGS, serverNow) } };
}

/**
 * Purge, second step: the resource documents that hold no lock live at `serverNow`, to delete. A
 * deleted document is re-created, with a later birth time, on its next use.
 */
export function emptyResourcesFilter(paths: LockPaths, serverNow: Date): Document {
  return { ...RESOURCE_DOCUMENTS, $and: RESOURCE_TAGS.map((tag) => noLiveEntry(paths, tag, serverNow)) };
}

/**
 * Read the server's clock in a resource collection: stamps (`$currentDate`) a meta document whose
 * `_id` (an object) can never be a resource's name, creating it if needed (sent as an upsert).
 */
export function clockReadOperation(metaId: Document): LockOperation {
  return { filter: { _id: metaId }, update: { $currentDate: { now: true } } };
}
