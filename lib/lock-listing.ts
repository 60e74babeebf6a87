import type { Collection, Document } from 'mongodb';
import { resourceLocks } from './resource-locks';
import type { StoredEntry, StoredLock, StoredTicket } from './stored-format';

/** One lock, or one waiter's ticket, as the `monglock` CLI lists it. */
export interface ListedLock {
  /** The locked document's `_id` (document locks) or the resource's name (resource locks). */
  readonly target: unknown;
  readonly tag: string;
  /** `held`, `waiting` (a fair-mode ticket) or `expired` (an entry nobody released; free for the next acquirer). */
  readonly state: 'held' | 'waiting' | 'expired';
  readonly lockId: string;
  readonly since: Date;
  /** null: no expiry (a resource lock without ttl). */
  readonly expiresAt: Date | null;
  /** ms left by the server's clock when read (-1: no expiry). */
  readonly remainingMs: number;
  /**
   * The document's fencing counter: the token of its latest acquisition (entries do not keep
   * their own; the holder's handle has it). null for waiters and resource locks.
   */
  readonly documentFence: number | null;
  /** Resource locks: who holds it. */
  readonly owner?: string | null;
}

/**
 * The locks stored in `collection`'s documents under `field` (writeLock, multiLock), judged by
 * the server's clock (`$$NOW`, read with them). Expired entries only with `all`.
 */
export async function listDocumentLocks(collection: Collection<Document>, field: string, options: { all?: boolean; limit?: number } = {}): Promise<ListedLock[]> {
  const docs = await collection
    .aggregate([{ $match: { [`${field}.tags`]: { $exists: true } } }, { $limit: options.limit ?? 1_000 }, { $project: { [field]: 1, now: '$$NOW' } }])
    .toArray();
  return docs.flatMap((doc) => {
    const now = (doc.now as Date).getTime();
    const lock = (doc[field] ?? {}) as StoredLock;
    const fence = typeof lock.fence === 'number' ? lock.fence : null;
    const entries = Object.entries(lock.tags ?? {}).flatMap(([tag, list]) =>
      (list ?? []).map((entry: StoredEntry): ListedLock => listed(doc._id, tag, entry, now, fence, entry.exp.getTime() > now ? 'held' : 'expired')),
    );
    const tickets = (lock.queue ?? []).map((ticket: StoredTicket): ListedLock => listed(doc._id, ticket.tag, ticket, now, null, ticket.exp.getTime() > now ? 'waiting' : 'expired'));
    return [...entries, ...tickets].filter((row) => options.all || row.state !== 'expired');
  });
}

function listed(target: unknown, tag: string, entry: { id: string; at: Date; exp: Date }, now: number, documentFence: number | null, state: ListedLock['state']): ListedLock {
  return { target, tag, state, lockId: entry.id, since: entry.at, expiresAt: entry.exp, remainingMs: Math.max(0, entry.exp.getTime() - now), documentFence };
}

/** The locks of a resource-lock collection (`resourceLocks`), by resource and lock id. */
export async function listResourceLocks(collection: Collection<Document>): Promise<ListedLock[]> {
  const statuses = await resourceLocks({ collection }).status();
  return statuses.map((status) => ({
    target: status.resource,
    tag: status.type,
    state: 'held',
    lockId: status.lockId,
    since: status.createdAt,
    expiresAt: status.expiresAt,
    remainingMs: status.ttl,
    documentFence: null,
    owner: status.owner,
  }));
}
