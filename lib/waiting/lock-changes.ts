import type { Collection, Document } from 'mongodb';

/**
 * How long a `getMore` waits on the server for a change (ms): an idle feed costs one command per
 * this. After a refusal a waiter relies on the stream only once a read answers (lib/waiting/
 * change-feed.ts), so it polls on its short schedule for up to this long: half a second keeps
 * that to a few attempts per safety poll (with 1 s, about 2 lock commands per waiter per second
 * instead of 1.3, bench:scale), for two `getMore`s a second per idle process and collection.
 */
export const AWAIT_MS = 500;

/**
 * The server-side filter of a feed: deletes, replacements, and updates that set or remove what
 * says who holds the lock — the field itself, its `tags` or one tag's list or entry, a pending
 * `upgrade`, `limits`, v2's `active`/`timestamp`, or the fair `queue` as a whole (a ticket taken
 * out) — not its bookkeeping (`now`, `until`, `fence`, one ticket, an entry's `exp`: so a
 * waiter's own ticket renewals and a holder's extensions wake nobody). An update event without a
 * description, as a server that gives none sends it, passes too. Only the document's key and the
 * resume token come back.
 *
 * An acquisition frees nothing, so it wakes nobody either: an update that moves the `fence` (every
 * acquisition and hand-over does, a release never) and changes one tag's list and nothing else that
 * says who holds the lock. A hot document's waiters in other processes were otherwise woken twice a
 * section, by its release and in vain by the next holder's acquisition. A fence moved with more
 * (a conversion's two tags, a fair acquisition's ticket taken out, expired entries of another tag
 * pruned, the whole field written) still passes: it may let another waiter in.
 */
export function lockChanges(field: string): Document[] {
  // A path's parts: the field; then `tags` with at most a tag and an index, `upgrade` or `limits` with anything, or `active`/`timestamp` alone.
  const parts = (path: string): Document => ({ $split: [path, '.'] });
  const part = (path: string, n: number): Document => ({ $arrayElemAt: [parts(path), n] });
  const size = (path: string): Document => ({ $size: parts(path) });
  const holds = (path: string): Document => ({
    $and: [
      { $eq: [part(path, 0), field] },
      {
        $or: [
          { $eq: [size(path), 1] },
          { $and: [{ $eq: [part(path, 1), 'tags'] }, { $lte: [size(path), 4] }] },
          { $in: [part(path, 1), ['upgrade', 'limits']] },
          { $and: [{ $eq: [size(path), 2] }, { $eq: [part(path, 1), 'queue'] }] }, // a ticket taken out (pulled: the whole array), so the next may go
          { $and: [{ $eq: [size(path), 2] }, { $in: [part(path, 1), ['active', 'timestamp']] }] },
        ],
      },
    ],
  });
  // Every path the update names: set, removed, or truncated.
  const changed = {
    $concatArrays: [
      { $map: { input: { $objectToArray: { $ifNull: ['$updateDescription.updatedFields', {}] } }, in: '$$this.k' } },
      { $ifNull: ['$updateDescription.removedFields', []] },
      { $map: { input: { $ifNull: ['$updateDescription.truncatedArrays', []] }, in: '$$this.field' } },
    ],
  };
  const holding = { $filter: { input: changed, cond: holds('$$this') } };
  // The tag whose list a path is in, or null for a path elsewhere (the field, `upgrade`, `queue`...).
  const tagOf = { $cond: [{ $and: [{ $eq: [part('$$this', 1), 'tags'] }, { $gte: [size('$$this'), 3] }] }, part('$$this', 2), null] };
  const tagsHeld = { $setUnion: [{ $map: { input: holding, in: tagOf } }] };
  const acquisition = { $and: [{ $in: [`${field}.fence`, changed] }, { $eq: [{ $size: tagsHeld }, 1] }, { $not: [{ $in: [null, tagsHeld] }] }] };
  return [
    {
      $match: {
        $or: [
          { operationType: { $in: ['delete', 'replace'] } },
          { operationType: 'update', updateDescription: { $exists: false } },
          { operationType: 'update', $expr: { $and: [{ $gt: [{ $size: holding }, 0] }, { $not: [acquisition] }] } },
        ],
      },
    },
    { $project: { documentKey: 1 } },
  ];
}

/**
 * How long a stream's `getMore` waits: `awaitMs` ({@link AWAIT_MS}), below the collection's client-side
 * operation timeout (`timeoutMS`; the driver refuses a wait that is not below it, and with 0, no
 * timeout, any explicit wait: the server's default, 1 s, then).
 */
export function awaitOptions(collection: Collection<Document>, awaitMs = AWAIT_MS): { maxAwaitTimeMS?: number } {
  const timeoutMS = (collection as unknown as { timeoutMS?: number }).timeoutMS;
  if (timeoutMS === undefined) return { maxAwaitTimeMS: awaitMs };
  return timeoutMS === 0 ? {} : { maxAwaitTimeMS: Math.max(1, Math.min(awaitMs, Math.floor(timeoutMS / 2))) };
}

/**
 * The server-side filter that sends a process only the changes of the documents its waiters wait
 * on: their `_id`s (`$in` matches numbers by value, as keyOf keys them: an Int32, a Long and a
 * Double of one value are one `_id`), and every event that names no document (mongo-java-server's
 * update events carry no `_id` in their documentKey; they are told as SOME_DOCUMENT).
 */
export function documentsMatch(ids: readonly unknown[]): Document {
  return { $match: { $or: [{ 'documentKey._id': { $in: ids } }, { 'documentKey._id': { $exists: false } }] } };
}
