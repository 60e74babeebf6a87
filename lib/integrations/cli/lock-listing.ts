import { limitNumber, windowOf } from '../../protocol/rate-window';
import { isKeptId } from '../../protocol/min-hold';
import type { Collection, Document } from 'mongodb';
import { entriesOf, RESOURCE_DOCUMENTS } from '../../resources/status';
import { RESOURCE_FIELD } from '../../protocol/resource-document';
import { readHolds, type ReadHold } from '../../protocol/lock-reading';
import { LockPaths, type StoredLock } from '../../protocol/stored-format';
import { usedPermits } from '../../protocol/permits';
import { holdsOf } from '../../protocol/reentry';
import { LEADER_TAG } from '../../protocol/leader';
import { fenceOf } from '../../protocol/lock-data';

/** One lock, or one waiter's ticket, as the `monglock` CLI lists it. */
export interface ListedLock {
  /** The locked document's `_id` (document locks) or the resource's name (resource locks). */
  readonly target: unknown;
  readonly tag: string;
  /**
   * `held`, `kept` (released before its minimum hold ended: it refuses others as a held lock until
   * it expires; `release` removes it), `waiting` (a fair-mode ticket), `upgrading` (a held lock's
   * conversion to `tag` waits: new locks of the tags it waits for are refused) or `expired` (an
   * entry nobody released).
   */
  readonly state: 'held' | 'kept' | 'waiting' | 'upgrading' | 'expired';
  readonly lockId: string;
  /**
   * Resource locks: the entry's own id, one acquisition (the lock id is its group: a later lock of
   * the group on the same resource is another entry). Document locks have none: their lock id is it.
   */
  readonly entryId?: string;
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
  /** Resource locks: who holds it; reentrant document locks: the owner whose hold it is. */
  readonly owner?: string | null;
  /** Reentrant document locks: how many live holds its owner has of this tag here (each listed). */
  readonly holds?: number;
  /** Semaphores (a tag with a limit): the permits this holder took, all held of the tag, and the stored limit. */
  readonly permits?: { readonly taken: number; readonly used: number; readonly limit: number | null; readonly window?: number };
  /** Elections (the tag `leader`): the leader's entry, with the value it proclaims. */
  readonly election?: { readonly value: unknown };
}

/** How far before the server's time (read first) documents are looked at: their entries are then judged by `$$NOW` itself. */
const CUTOFF_MARGIN_MS = 60_000;

/**
 * The locks stored in `collection`'s documents under `field` (writeLock, multiLock), judged by
 * the server's clock (`$$NOW`, read with them), read on the primary. Without a cap: every
 * document whose `until` (the latest expiry written there) has not passed, which the
 * {@link suggestedIndex} serves; a document whose locks all ended long ago is not read. With
 * `all`, every document that ever held a lock or a ticket is read (the whole index, or a
 * collection scan without it), and expired entries nobody released are listed too.
 */
export function listDocumentLocks(collection: Collection<Document>, field: string, options: { all?: boolean } = {}): Promise<ListedLock[]> {
  const all = options.all === true;
  return readListing(collection, field, {}, all, (doc) => locksOf(doc, field, all));
}

/**
 * The locks of a resource-lock collection (`resourceLocks`), one row per entry, read as
 * {@link listDocumentLocks} reads (by `lock.until`, judged by `$$NOW`; expired entries too with `all`).
 */
export function listResourceLocks(collection: Collection<Document>, options: { all?: boolean } = {}): Promise<ListedLock[]> {
  const all = options.all === true;
  return readListing(collection, RESOURCE_FIELD, RESOURCE_DOCUMENTS, all, (doc) =>
    entriesOf(new LockPaths(RESOURCE_FIELD), doc, (doc.now as Date).getTime())
      .filter((entry) => all || entry.live)
      .map(({ status, entryId, live }) => ({
        target: status.resource,
        tag: status.type,
        state: live ? (isKeptId(entryId) ? 'kept' : 'held') : 'expired',
        lockId: status.lockId,
        entryId,
        since: status.createdAt,
        expiresAt: status.expiresAt,
        remainingMs: status.ttl,
        documentFence: null,
        owner: status.owner,
      })),
  );
}

/** The rows `rowsOf` makes of each document of `only` that {@link listingMatch} selects, read on the primary with `now` (`$$NOW`). */
async function readListing(collection: Collection<Document>, field: string, only: Document, all: boolean, rowsOf: (doc: Document) => ListedLock[]): Promise<ListedLock[]> {
  const match = all ? listingMatch(field) : listingMatch(field, new Date((await serverTime(collection)).getTime() - CUTOFF_MARGIN_MS));
  const rows: ListedLock[] = [];
  const cursor = collection.aggregate([{ $match: { ...only, ...match } }, { $project: { [field]: 1, now: '$$NOW' } }], { readPreference: 'primary' });
  for await (const doc of cursor) rows.push(...rowsOf(doc));
  return rows;
}

/**
 * What `status` matches: documents whose `until` is after `cutoff`, or with no cutoff (`--all`)
 * every document that has an `until` (every write that leaves a lock or a ticket sets it). Both
 * imply the {@link suggestedIndex}'s partial filter (a `$gt` on a date implies `$exists: true`),
 * so mongod can serve them from that index.
 */
export function listingMatch(field: string, cutoff?: Date): Document {
  const until = new LockPaths(field).until;
  return { [until]: cutoff === undefined ? { $exists: true } : { $gt: cutoff } };
}

/**
 * The index that lets `status` read only the documents that may hold a lock: `{ '<field>.until': 1 }`,
 * partial on `'<field>.until': { $exists: true }`, so that only documents that ever held a lock
 * (or a ticket) are indexed, not every document of the collection.
 */
export function suggestedIndex(field: string): { readonly key: Document; readonly options: { readonly partialFilterExpression: Document } } {
  const until = new LockPaths(field).until;
  return { key: { [until]: 1 }, options: { partialFilterExpression: { [until]: { $exists: true } } } };
}

/** The suggested index as a shell command (`createIndex(...)`). */
export function suggestedIndexCommand(field: string): string {
  const path = new LockPaths(field).until;
  return `createIndex({ '${path}': 1 }, { partialFilterExpression: { '${path}': { $exists: true } } })`;
}

/**
 * Which index led by `<field>.until` `indexes` (as `collection.indexes()` lists them) hold:
 * `partial` (the suggested one, or a sparse one, which indexes the same documents), `full` (one
 * that indexes every document: it serves, at the cost of an entry per document of the
 * collection), or undefined (none, or only ones with another partial filter).
 */
export function untilIndexOf(indexes: readonly Document[], field: string): { readonly kind: 'partial' | 'full'; readonly name: string } | undefined {
  const { key, options } = suggestedIndex(field);
  const path = Object.keys(key)[0]!;
  const leading = indexes.filter((index) => Object.keys((index.key ?? {}) as Document)[0] === path);
  const wanted = JSON.stringify(options.partialFilterExpression);
  const partial = leading.find((index) => (index.partialFilterExpression === undefined ? index.sparse === true : JSON.stringify(index.partialFilterExpression) === wanted));
  if (partial) return { kind: 'partial', name: String(partial.name) };
  const full = leading.find((index) => index.partialFilterExpression === undefined);
  return full ? { kind: 'full', name: String(full.name) } : undefined;
}

/** The locks of one document (its lock property and `now`, the server's clock), live ones only unless `all`. */
export function locksOf(doc: Document, field: string, all: boolean): ListedLock[] {
  const now = (doc.now as Date).getTime();
  const lock = (doc[field] ?? {}) as StoredLock;
  const fence = typeof lock.fence === 'number' ? fenceOf(lock) : null;
  const { entries, tickets } = readHolds(lock, now);
  const rows = [
    ...entries.map((entry) => ({ ...listed(doc._id, entry, now, fence, entry.live ? (entry.extra.kept === true ? 'kept' : 'held') : 'expired'), ...holdDetails(lock, entry, now) })),
    ...tickets.map((ticket) => listed(doc._id, ticket, now, null, ticket.live ? 'waiting' : 'expired')),
    ...(lock.upgrade ?? []).map((mark) => ({
      target: doc._id,
      tag: mark.tag,
      state: mark.exp.getTime() > now ? ('upgrading' as const) : ('expired' as const),
      lockId: mark.id,
      since: mark.exp,
      expiresAt: mark.exp,
      remainingMs: Math.max(0, mark.exp.getTime() - now),
      documentFence: null,
    })),
  ];
  return rows.filter((row) => all || row.state !== 'expired');
}

/** The locks of the document whose `_id` is `id` (every entry, expired ones included), read on the primary. */
export async function documentLocks(collection: Collection<Document>, field: string, id: unknown): Promise<ListedLock[]> {
  const docs = await collection.aggregate([{ $match: { _id: id } }, { $project: { [field]: 1, now: '$$NOW' } }], { readPreference: 'primary' }).toArray();
  return docs.flatMap((doc) => locksOf(doc, field, true));
}

/** The primary's clock (`isMaster.localTime`). */
export async function serverTime(collection: Collection<Document>): Promise<Date> {
  const hello = await collection.db.command({ isMaster: 1 }, { readPreference: 'primary' });
  return hello.localTime instanceof Date ? hello.localTime : new Date(0);
}

/** What a document lock's entry adds: an election's value, its owner and how many holds the owner has, its permits of a semaphore. */
function holdDetails(lock: StoredLock, entry: ReadHold, now: number): Pick<ListedLock, 'owner' | 'holds' | 'permits' | 'election'> {
  const { owner, permits } = entry.extra;
  return {
    ...(entry.tag === LEADER_TAG && { election: { value: entry.extra.value ?? null } }),
    ...(typeof owner === 'string' && { owner, holds: holdsOf(lock, entry.tag, owner, now).length }),
    ...(typeof permits === 'number' && { permits: { taken: permits, used: usedPermits(lock, entry.tag, now), ...storedLimitOf(lock, entry.tag) } }),
  };
}

/** The limit stored for `tag` (null: none), and a rate limit's window (lib/protocol/rate-window.ts). */
function storedLimitOf(lock: StoredLock, tag: string): { limit: number | null; window?: number } {
  const stored = lock.limits?.[tag];
  const window = windowOf(stored);
  return { limit: limitNumber(stored), ...(window !== undefined && { window }) };
}

function listed(target: unknown, hold: ReadHold, now: number, documentFence: number | null, state: ListedLock['state']): ListedLock {
  return { target, tag: hold.tag, state, lockId: hold.id, since: hold.at, expiresAt: hold.exp, remainingMs: Math.max(0, hold.exp.getTime() - now), documentFence };
}
