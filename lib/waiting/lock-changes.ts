import type { Collection, Document } from 'mongodb';

/**
 * How long a `getMore` waits on the server for a change (ms): an idle feed costs one command per
 * this. After a refusal a waiter relies on the stream only once a read answers (lib/waiting/
 * change-feed.ts), so it polls on its short schedule for up to this long: half a second keeps
 * that to a few attempts per safety poll (with 1 s, about 2 lock commands per waiter per second
 * instead of 1.3, bench:scale), for two `getMore`s a second per idle process and collection.
 */
export const AWAIT_MS = 500;

/** Fields the filter adds to an event while it decides (its last stage keeps only the document's key). */
const PATHS = 'monglockPaths';
const TAGS_HELD = 'monglockTagsHeld';
const FENCE_MOVED = 'monglockFenceMoved';

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
  // Each path the update names (set, removed, or truncated), split once into its parts.
  const paths = {
    $map: {
      input: {
        $concatArrays: [
          { $map: { input: { $objectToArray: { $ifNull: ['$updateDescription.updatedFields', {}] } }, in: '$$this.k' } },
          { $ifNull: ['$updateDescription.removedFields', []] },
          { $map: { input: { $ifNull: ['$updateDescription.truncatedArrays', []] }, in: '$$this.field' } },
        ],
      },
      in: { $split: ['$$this', '.'] },
    },
  };
  const part = (n: number): Document => ({ $arrayElemAt: ['$$this', n] });
  const size = { $size: '$$this' };
  // A path's parts: the field; then `tags` with at most a tag and an index, `upgrade` or `limits` with anything, or `active`/`timestamp` alone.
  const holds = {
    $and: [
      { $eq: [part(0), field] },
      {
        $or: [
          { $eq: [size, 1] },
          { $and: [{ $eq: [part(1), 'tags'] }, { $lte: [size, 4] }] },
          { $in: [part(1), ['upgrade', 'limits']] },
          { $and: [{ $eq: [size, 2] }, { $eq: [part(1), 'queue'] }] }, // a ticket taken out (pulled: the whole array), so the next may go
          { $and: [{ $eq: [size, 2] }, { $in: [part(1), ['active', 'timestamp']] }] },
        ],
      },
    ],
  };
  // Among the paths: the fence moved (every acquisition and hand-over, never a release)...
  const fenceMoved = { $gt: [{ $size: { $filter: { input: `$${PATHS}`, cond: { $and: [{ $eq: [size, 2] }, { $eq: [part(0), field] }, { $eq: [part(1), 'fence'] }] } } } }, 0] };
  // ...and the paths that say who holds the lock, each as the tag whose list it is in, or null (the field, `upgrade`, `queue`...).
  const tagsHeld = { $setUnion: [{ $map: { input: { $filter: { input: `$${PATHS}`, cond: holds } }, in: { $cond: [{ $and: [{ $eq: [part(1), 'tags'] }, { $gte: [size, 3] }] }, part(2), null] } } }] };
  const held = `$${TAGS_HELD}`;
  return [
    // Computed once per event (a server without $let: mongo-java-server), then matched.
    { $addFields: { [PATHS]: paths } },
    { $addFields: { [TAGS_HELD]: tagsHeld, [FENCE_MOVED]: fenceMoved } },
    {
      $match: {
        $or: [
          { operationType: { $in: ['delete', 'replace'] } },
          { operationType: 'update', updateDescription: { $exists: false } },
          // It changes who holds the lock, and is not an acquisition (the fence moved, one tag's list changed, nothing else).
          { operationType: 'update', $expr: { $and: [{ $gt: [{ $size: held }, 0] }, { $not: [{ $and: [`$${FENCE_MOVED}`, { $eq: [{ $size: held }, 1] }, { $not: [{ $in: [null, held] }] }] }] }] } },
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
