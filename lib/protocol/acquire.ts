import type { Document } from 'mongodb';
import { queuedBehind, type Ticket, type TagRule } from './lock-data';
import { clearLimit, isLimited, isUnlimitedShared, noStoredLimit, permitConditions, recordLimit } from './permits';
import { counterIs, ownerHoldsNone, type OwnedAcquisition } from './reentry';
import { noPendingUpgrade } from './convert';
import { noEarlierTicket } from './tickets';
import { mergeUpdates, type LockOperation } from './operation';
import {
  allOf,
  hasEntry,
  noLiveEntry,
  pruneCommits,
  pruneTags,
  recordJudged,
  stampWithin,
  type LockPaths,
  type StoredEntry,
} from './stored-format';
import { recordStamp, stampNotBeforeRecent } from './recent-stamps';
import { notQuarantined } from './quarantine';
import { minHoldEntry } from './min-hold';
import { recordWindowStamp, windowStampConditions } from './rate-window';

/** What a lock kind adds to an acquisition (resource locks: owner details, a limit, a GC date). */
export interface AcquireExtension {
  /** Extra fields stored in the entry. */
  readonly entry?: Document;
  /** Extra filter clauses, given the stamp. */
  readonly conditions?: (stamp: Date) => Document[];
  /** Extra update operators (never on the tag arrays), given the stamp and the expiry. */
  readonly update?: (stamp: Date, exp: Date) => Document;
}

/** An acquisition to send. */
export interface AcquireRequest {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** Every tag of the lock: the expired entries of the others are pruned on the way. */
  readonly tags: Iterable<string>;
  /** The caller's filter: the first document it matches is locked. */
  readonly filter: Document;
  /** The new entry: its random id, its stamp (`at`, from the lower bound of the server's clock) and expiry. */
  readonly entry: StoredEntry;
  /** How far below the server's `$$NOW` the stamp may be, in ms. */
  readonly tolerance: number;
  /** Fair mode: the waiter's ticket, if it has one. */
  readonly fair?: { readonly ticket?: Ticket };
  /** For a tag with a limit: the permits it takes (default 1). */
  readonly permits?: number;
  /** A reentrant acquisition's owner, and the document's fencing counter it read (its entry keeps the next one). */
  readonly owned?: OwnedAcquisition;
  readonly extension?: AcquireExtension;
  /**
   * A hand-over (an exclusive tag only): the id of the entry of this tag that this acquisition
   * takes the place of, its holder's, which must still be there; it does not count as a live lock.
   */
  readonly replacing?: string;
  /** With `replacing`: the holder's entry must have no `hold` (a lock passed back without minHoldUntil: one taken with minHold is not handed over, lib/protocol/min-hold.ts). */
  readonly replacingHasNoHold?: boolean;
  /** ms of minimum hold (lib/protocol/min-hold.ts); on a limited tag, a rate limit's window (lib/protocol/rate-window.ts). */
  readonly minHold?: number;
  /** With `minHold`: when it ends, which the entry stores (`at + minHold`, stored longer by the clocks' skew as a lease is). */
  readonly holdUntil?: Date;
}

/**
 * Acquire: a new lock of `rule.tag` on the first document matching `filter`.
 *
 * Checks, in the filter: no unexpired entry of a tag this one is cooperative with, judged at the
 * stamp, which the same filter proves to be at or below `$$NOW` and within `tolerance` of it (so
 * a live lock never looks expired); for an exclusive tag, a stamp not earlier than its last two
 * acquisitions; for a tag with a limit, that every entry of it live at the stamp is a permit (a
 * process that declares the tag without a limit, exclusive say, is not counted as one permit) and
 * that the permits live at the stamp plus these stay within the limit stored in the document, which
 * must be the caller's unless no permit is live (see lib/protocol/permits.ts); for an owner's first hold, that the fencing counter is still the one
 * read (so that its entry can keep its token for the owner's nested holds), or unpinned, that the
 * owner holds none by `$$NOW` (so that it has one first hold, one token); no pending upgrade
 * that waits for this tag (lib/protocol/convert.ts: writer preference); no live quarantine mark
 * (lib/protocol/quarantine.ts); in fair mode, no live ticket of a cooperative tag (or, limited, of
 * its own) that came first; and the kind's conditions.
 *
 * Writes the entry (replacing an exclusive tag's array, whose entries the filter proved expired;
 * with its `permits` and the limit for a limited tag),
 * +1 on the fence, the server's clock (`$currentDate` of `now`), the latest expiry (`$max` of
 * `until`), the stamp as `judged` (every entry it counted as expired is dead), and prunes the expired entries of the other tags and the commit records past their
 * time (at the stamp, which the server has passed); in fair mode, it takes the waiter's ticket
 * and the expired tickets out of the queue.
 *
 * Why it never admits a second holder: the only writes that add an entry are this one, and it
 * matches only while every entry that excludes it has expired by the server's clock. Two
 * acquisitions cooperative with each other are serialized by the document's update, and the
 * second one's filter sees the first one's entry; the same holds for the permits of a limited tag,
 * whose count at the stamp includes every entry live at `$$NOW` or later, and which refuses any live
 * entry that is not a permit, as an exclusive tag refuses any live entry of its own. With `replacing` (see
 * lib/protocol/hand-over.ts), the one entry it does not count is the holder's, which must be
 * there and which the same update removes (it replaces the exclusive tag's array).
 */
export function acquireOperation(request: AcquireRequest): LockOperation {
  const { paths, rule, entry, fair, extension, replacing } = request;
  const { tag } = rule;
  if (replacing !== undefined && !rule.exclusive) throw new TypeError(`Only an exclusive tag's lock is handed over, not \`${tag}\`'s`);
  const at = entry.at;
  const others = [...request.tags].filter((other) => other !== tag);
  const limited = isLimited(rule) ? rule : undefined;
  const permits = request.permits ?? 1;
  // A limited tag's permits taken with minHold: a rate limit over that window (lib/protocol/rate-window.ts).
  const window = limited ? request.minHold : undefined;
  const owned = request.owned;
  const stored: StoredEntry = { ...extension?.entry, ...entry, ...minHoldEntry(request.holdUntil), ...(limited ? { permits } : {}), ...(owned ? { owner: owned.owner, ...(owned.counter !== undefined && { fence: owned.counter + 1 }) } : {}) };
  const queueTags = queuedBehind(rule);
  const queue = fair ? { [paths.queue]: fair.ticket ? { $or: [{ id: fair.ticket.id }, { exp: { $lte: at } }] } : { exp: { $lte: at } } } : undefined;
  const update = mergeUpdates(
    {
      $inc: { [paths.fence]: 1 },
      $currentDate: { [paths.now]: true },
      $max: { [paths.until]: entry.exp, ...recordJudged(paths, at) },
      ...(rule.exclusive ? { $set: { [paths.tag(tag)]: [stored] }, $push: recordStamp(paths, tag, at) } : { $push: { [paths.tag(tag)]: stored } }),
      $pull: { ...pruneTags(paths, others, at, true), ...pruneCommits(paths, at), ...queue },
    },
    limited && recordLimit(paths, limited, window),
    window !== undefined ? recordWindowStamp(paths, tag, at) : undefined,
    isUnlimitedShared(rule) ? clearLimit(paths, tag) : undefined,
    extension?.update?.(at, entry.exp),
  );
  const filter = allOf(request.filter, [
    notQuarantined(paths),
    ...rule.cooperative.map((other) => (other === tag && replacing !== undefined ? noLiveEntry(paths, other, at, replacing) : noLiveEntry(paths, other, at))),
    ...(replacing !== undefined ? [hasEntry(paths, tag, { id: replacing, ...(request.replacingHasNoHold && { hold: { $exists: false } }) })] : []),
    ...(rule.exclusive ? [stampNotBeforeRecent(paths, tag, at)] : []),
    ...(limited ? permitConditions(paths, limited, permits, at, window) : isUnlimitedShared(rule) ? [noStoredLimit(paths, tag, at)] : []),
    ...(window !== undefined ? windowStampConditions(paths, tag, at) : []),
    ...(owned ? [owned.counter !== undefined ? counterIs(paths, owned.counter) : ownerHoldsNone(paths, tag, owned.owner)] : []),
    ...(rule.yieldsToUpgradesOf?.length ? [noPendingUpgrade(paths, rule.yieldsToUpgradesOf, at)] : []),
    ...(fair && queueTags.length > 0 ? [noEarlierTicket(paths, queueTags, at, fair.ticket)] : []),
    { $expr: stampWithin(at, request.tolerance) },
    ...(extension?.conditions?.(at) ?? []),
  ]);
  return { filter, update };
}
