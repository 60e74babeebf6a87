import type { Document } from 'mongodb';
import type { StoredQuarantine } from './quarantine';

/**
 * The lock as stored in a document, under `options.field` (default `lock`):
 *
 * ```
 * lock: {
 *   fence: 7,                       // fencing counter: +1 per acquisition, never reset
 *   now: ISODate,                   // the server's clock at the last acquire/extend ($currentDate)
 *   recent: { write: [ISODate, ISODate] },  // exclusive tags: the last two acquisition stamps (never decreasing)
 *   queue: [ { id: '7a…', tag: 'write', at: ISODate, exp: ISODate }, … ],  // fair mode: waiters' tickets
 *   committed: [ { id: '5d…', lock: '9f…', exp: ISODate, group: '2a…' }, … ],  // records of recent
 *                                   // commits (each commit's own id, the lock it released, the group
 *                                   // of a commitAll), kept until exp, at most 64: how a lost reply
 *                                   // is settled, and which members of a group's commit landed
 *   upgrade: [ { id: '1c…', tag: 'write', exp: ISODate } ],  // a pending upgrade (convert with wait): at most one live
 *   limits: { permit: 4 },          // tags with a limit (semaphores): the limit their permits were judged by
 *   until: ISODate,                 // the latest expiry ever written (locks and tickets): a document
 *                                   // whose until has passed holds nothing live (the CLI lists by it)
 *   judged: ISODate,                // the latest stamp a write judged entries at ($max): an entry
 *                                   // that expired by it is dead, whatever lands later
 *   tags: {
 *     write: [ { id: '9f…', at: ISODate, exp: ISODate } ],   // one array per tag
 *     read:  [ { id: '1c…', at: ISODate, exp: ISODate }, … ],
 *     permit: [ { id: '3b…', at: ISODate, exp: ISODate, permits: 2 }, … ],  // a tag with a limit
 *     edit: [ { id: '4e…', at: ISODate, exp: ISODate, owner: 'req-7', fence: 9 }, … ]  // an owner's holds
 *   }
 * }
 * ```
 *
 * `id` is 128 random bits (hex), `at` the acquisition stamp and `exp` the expiry, both in the
 * server's time. writeLock is the tag `write`, cooperative with itself, so writeLock and multiLock
 * share this format and never overwrite each other's entries. Resource documents also have
 * `born`, the server's clock when the document was created (their fencing tokens start there).
 */
export interface StoredEntry {
  id: string;
  at: Date;
  exp: Date;
  /** The permits it holds, in a tag with a limit (absent: one). */
  permits?: number;
  /** Reentrant locks: the owner whose hold it is (each of an owner's nested holds is an entry of its own). */
  owner?: string;
  /** Reentrant locks: the fencing token of the owner's lock, which every nested hold keeps. */
  fence?: number;
  /** A lock taken with `minHold`: when its minimum hold ends (`at` + minHold). */
  hold?: Date;
  /** Released before its minimum hold ended: no hold any more, kept (under another id) until `exp`, the hold's end. */
  kept?: boolean;
}

/** A waiter's place in a fair queue: its tag, when it came (server time) and until when it is live. */
export interface StoredTicket {
  id: string;
  tag: string;
  at: Date;
  exp: Date;
}

/**
 * The record a commit leaves: the commit's own id (two commits of one lock are told apart), the id
 * of the lock it released, and the server time until which the record is kept (acquisitions prune
 * it after). Records are kept sorted by `exp`, at most 64 of them (`COMMIT_RECORDS`), so one can
 * only be evicted early by as many with a later `exp`.
 */
export interface StoredCommit {
  id: string;
  lock: string;
  exp: Date;
  /** The group (`acquireAll`) whose `commitAll` this commit was part of. */
  group?: string;
}

/** A pending upgrade: the holder of lock `id` waits to convert it to `tag`; live until `exp` unless renewed. */
export interface StoredUpgrade {
  id: string;
  tag: string;
  exp: Date;
}

/** The most commit records a document keeps: the bound on its size on a hot document (about 4 kB). */
export const COMMIT_RECORDS = 64;

/** The stored lock property. */
export interface StoredLock {
  fence?: number;
  /** The server's clock when the last acquire, extend or continuation ran. */
  now?: Date;
  /** Exclusive tags: the last two acquisition stamps; a new one may not be earlier. */
  recent?: Record<string, Date[] | undefined>;
  /** Resource documents only: the server's clock when the document was created. */
  born?: Date;
  /** Fair mode: the tickets of waiters, first come first served. */
  queue?: StoredTicket[];
  /** Records of recent commits (releases with an update): how a commit whose reply was lost is settled. */
  committed?: StoredCommit[];
  /** A pending upgrade (at most one live): new acquisitions of the tags it waits for are refused. */
  upgrade?: StoredUpgrade[];
  /** Tags with a limit (semaphores): the limit the live permits were acquired under. */
  limits?: Record<string, number | { limit: number; window: number } | undefined>;
  /** The latest expiry written (`$max`), of a lock or a ticket: nothing in the document is live once the server's clock passes it. */
  until?: Date;
  /** The latest stamp at which a write judged the entries (`$max`): an entry that expired by it is dead, whatever command lands later. */
  judged?: Date;
  /** A quarantine mark: while it is live, every acquisition is refused (lib/protocol/quarantine.ts). */
  quarantine?: StoredQuarantine;
  tags?: Record<string, StoredEntry[] | undefined>;
}

/**
 * Names a tag may not have: the keys of the stored lock property (monglock 3's, and v2 writeLock's
 * `active`/`timestamp`). monglock v2 stored a tag's entries at `lock.<tag>`, so a v2 document with
 * a tag of one of these names collides with this layout (an acquisition fails with DbError).
 */
export const RESERVED_TAG_NAMES: ReadonlySet<string> = new Set(['fence', 'now', 'recent', 'born', 'queue', 'committed', 'until', 'judged', 'tags', 'limits', 'upgrade', 'quarantine', 'active', 'timestamp']);

/** Dot paths into the stored lock property. */
export class LockPaths {
  readonly fence: string;
  readonly now: string;
  readonly born: string;
  readonly queue: string;
  readonly committed: string;
  readonly until: string;
  readonly judged: string;
  readonly upgrade: string;
  /** The projection of a write's reply: every part of the lock but the commit records, which only settling reads. */
  readonly reply: Readonly<Record<string, 1>>;
  /** The narrowest projection of an acquisition's reply: its fencing token (`fence`, `born`) and the server's clock (`now`). */
  readonly token: Readonly<Record<string, 1>>;

  constructor(readonly field: string) {
    this.fence = `${field}.fence`;
    this.now = `${field}.now`;
    this.born = `${field}.born`;
    this.queue = `${field}.queue`;
    this.committed = `${field}.committed`;
    this.until = `${field}.until`;
    this.judged = `${field}.judged`;
    this.upgrade = `${field}.upgrade`;
    this.token = { [this.fence]: 1, [this.born]: 1, [this.now]: 1 };
    this.reply = Object.fromEntries([this.fence, this.now, this.born, this.queue, this.until, this.judged, `${field}.recent`, `${field}.tags`, `${field}.limits`, this.upgrade].map((path) => [path, 1]));
  }

  /** The last two acquisition stamps of an exclusive tag. */
  recent(tag: string): string {
    return `${this.field}.recent.${tag}`;
  }

  /** The limit a limited tag's permits were acquired under. */
  limit(tag: string): string {
    return `${this.field}.limits.${tag}`;
  }

  /** The array of a tag's entries. */
  tag(tag: string): string {
    return `${this.field}.tags.${tag}`;
  }

  /** The stored lock of a document returned by the server. */
  read(doc: Document | null | undefined): StoredLock {
    const value: unknown = doc?.[this.field];
    return typeof value === 'object' && value !== null ? (value as StoredLock) : {};
  }
}

/** Entries of `tag` in `lock` that are unexpired at `stamp` (ms), and not dead by its `judged` stamp. */
export function liveEntries(lock: StoredLock, tag: string, stamp: number): StoredEntry[] {
  const entries = lock.tags?.[tag];
  if (!Array.isArray(entries)) return [];
  const after = Math.max(stamp, lock.judged instanceof Date ? lock.judged.getTime() : 0);
  return entries.filter((entry) => entry.exp instanceof Date && entry.exp.getTime() > after);
}

/** Entries of `tag` in `lock` that its `judged` stamp has not killed: what {@link everyEntryDead} refuses. */
export function undeadEntries(lock: StoredLock, tag: string): StoredEntry[] {
  return liveEntries(lock, tag, 0);
}

/** True when `tag`'s array holds an entry that expired at or before `stamp`. */
export function hasExpiredEntries(lock: StoredLock, tag: string, stamp: number): boolean {
  const entries = lock.tags?.[tag];
  return Array.isArray(entries) && entries.some((entry) => !(entry.exp instanceof Date) || entry.exp.getTime() <= stamp);
}

/**
 * Filter: no entry of `tag` is unexpired at `stamp`, but the entry `except` (a holder handing its
 * lock over). (`$not` + `$elemMatch`: a dot path would match any element.)
 */
export function noLiveEntry(paths: LockPaths, tag: string, stamp: Date, except?: string): Document {
  return { [paths.tag(tag)]: { $not: { $elemMatch: except === undefined ? { exp: { $gt: stamp } } : { exp: { $gt: stamp }, id: { $ne: except } } } } };
}

/** Filter: `tag` holds an entry matching `match`. */
export function hasEntry(paths: LockPaths, tag: string, match: Document): Document {
  return { [paths.tag(tag)]: { $elemMatch: match } };
}

/**
 * The document's `judged` stamp, as an `$expr` operand (the epoch when none was written). Every
 * write that judges entries at a stamp (an acquisition, conversion, re-entry, continuation or
 * extension) raises it to that stamp: an entry that expired by it may have been counted as free,
 * and a command sent while the entry was live that lands later (its `$$NOW` fixed when it started)
 * must not extend it, write under it or count it as held. Removing every such entry would say the
 * same, but a shared tag's own entries cannot be removed by the update that pushes onto its array.
 */
function judgedStamp(paths: LockPaths): Document {
  return { $ifNull: [`$${paths.judged}`, new Date(0)] };
}

/** `$expr` conditions on `$$entry` (an entry of a `$map` or `$filter`): unexpired by the server's clock (`$$NOW`) and not dead by the document's `judged` stamp. */
export function entryUnexpired(paths: LockPaths): Document[] {
  return [{ $gt: ['$$entry.exp', '$$NOW'] }, { $gt: ['$$entry.exp', judgedStamp(paths)] }];
}

/** Update (`$max`): records `stamp`, at which the write judged the entries (see {@link judgedStamp}). */
export function recordJudged(paths: LockPaths, stamp: Date): Document {
  return { [paths.judged]: stamp };
}

/**
 * `$expr` operand: `tag` holds the entry identified by `proof` (its id, or its acquisition ms),
 * unexpired by the server's clock (`$$NOW`) and not dead by the document's `judged` stamp.
 */
export function entryLiveOnServer(paths: LockPaths, tag: string, proof: { id: string } | { timestamp: number }): Document {
  const identifies =
    'id' in proof
      ? { $eq: ['$$entry.id', proof.id] }
      : // a v2 timestamp never names a lock taken with minHold (see proofMatch in lib/protocol/proofs.ts)
        { $and: [{ $gte: ['$$entry.at', new Date(proof.timestamp)] }, { $lt: ['$$entry.at', new Date(proof.timestamp + 1)] }, { $not: [{ $ifNull: ['$$entry.hold', false] }] }] };
  return {
    $in: [
      true,
      {
        $map: {
          input: { $ifNull: [`$${paths.tag(tag)}`, []] },
          as: 'entry',
          in: { $and: [identifies, ...entryUnexpired(paths)] },
        },
      },
    ],
  };
}

/**
 * `$expr` operand: every entry of `tag` is dead by the document's `judged` stamp: an earlier
 * stamped write judged it expired (a continuation does for the tags an assertive lock waits for),
 * so no late command can make it live again. Stricter than "expired by `$$NOW`", which a late
 * extension could undo.
 */
export function everyEntryDead(paths: LockPaths, tag: string): Document {
  return { $not: [{ $anyElementTrue: [{ $map: { input: { $ifNull: [`$${paths.tag(tag)}`, []] }, as: 'entry', in: { $gt: ['$$entry.exp', judgedStamp(paths)] } } }] }] };
}

/** `$expr` operand: the stamp lies within `[$$NOW - toleranceMs, $$NOW]` by the server's clock. */
export function stampWithin(stamp: Date, toleranceMs: number): Document {
  return { $and: [{ $lte: [stamp, '$$NOW'] }, { $gte: [stamp, { $subtract: ['$$NOW', toleranceMs] }] }] };
}

/**
 * `filter` and `conditions` combined with `$and` at the top level, leaving the caller's own fields
 * (its `_id`, say) where query planners look for them. The caller's object is not changed.
 */
export function allOf(filter: Document, conditions: Document[]): Document {
  if (filter.$and === undefined) return { ...filter, $and: conditions };
  if (Array.isArray(filter.$and)) return { ...filter, $and: [...(filter.$and as Document[]), ...conditions] };
  return { $and: [filter, ...conditions] }; // an invalid $and of the caller's: the server says so
}

/**
 * Update: remove the entries of each tag that expired at or before `stamp` (a stamp the server has
 * passed). With `keepHolds` (a write of another tag), not those taken with `minHold` (a `hold`):
 * a kept entry or a rate limit's permit ends for its own tag's acquisitions only, each judged at
 * its own stamp, so that an acquisition of that tag stamped earlier, arriving later, still counts
 * it (lib/protocol/min-hold.ts).
 */
export function pruneTags(paths: LockPaths, tags: Iterable<string>, stamp: Date, keepHolds = false): Document {
  const pull: Document = {};
  for (const tag of tags) pull[paths.tag(tag)] = keepHolds ? { exp: { $lte: stamp }, hold: { $exists: false } } : { exp: { $lte: stamp } };
  return pull;
}

/** Update (`$pull`): remove the commit records kept until `stamp` or earlier (a stamp the server has passed). */
export function pruneCommits(paths: LockPaths, stamp: Date): Document {
  return { [paths.committed]: { exp: { $lte: stamp } } };
}

/** Update (`$push`): records a commit, keeping the records sorted by `exp` and at most {@link COMMIT_RECORDS}. */
export function recordCommit(paths: LockPaths, record: StoredCommit): Document {
  return { [paths.committed]: { $each: [record], $sort: { exp: 1 }, $slice: -COMMIT_RECORDS } };
}
