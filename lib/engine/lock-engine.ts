import type { Document } from 'mongodb';
import { commitRecord, settleCommit } from './commit-outcome';
import { isLockError, lockError, withDbErrors, type LockErrorSubtype } from '../common/errors';
import type { LockData } from '../locks/lock-handle';
import { newLockId } from '../protocol/lock-ids';
import type { ResolvedCallOptions } from '../common/options';
import type { TagRule } from '../locks/relationships';
import type { ServerClock } from '../protocol/server-clock';
export type { Proof } from '../protocol/proofs';
import { ambiguous, matchesProof, proofMatch, type Proof } from '../protocol/proofs';
import { stampLag, stampRefused, type Verdict } from './stamp-refusals';
import { namesField, type Inspection, type Store, type Timed } from './store';
import { classifyWriteFailure, describeWriteFailure } from './write-failures';
import {
  allOf,
  entryLiveOnServer,
  hasEntry,
  hasExpiredEntries,
  liveEntries,
  LockPaths,
  noLiveEntry,
  pruneCommits,
  pruneTags,
  recordCommit,
  earlierTickets,
  noEarlierTicket,
  noEntryLiveOnServer,
  recordStamp,
  stampNotBeforeRecent,
  stampWithin,
  timestampUnique,
  type StoredEntry,
  type StoredLock,
} from '../protocol/stored-format';

/** What a lock kind adds to an acquisition (resource locks: owner details, limits, GC date). */
export interface AcquireExtras {
  /** Extra fields stored in the entry. */
  readonly entry?: Document;
  /** Extra filter clauses, given the stamp. */
  readonly conditions?: (stamp: Date) => Document[];
  /** Why the extra conditions refuse `lock` at server time `now` (ms), if they do: the refusal's detail. */
  readonly refusal?: (lock: StoredLock, now: number) => string | undefined;
  /** Extra update operators (never on the tag arrays), given the stamp and the expiry. */
  readonly update?: (stamp: Date, exp: Date) => Document;
  /**
   * When false, a refusal is reported as a conflict without the read that explains it (one
   * command instead of two): for retries while waiting, once a refusal has been explained.
   */
  readonly explain?: boolean;
  /** Return the locked document too: `true` all of it, or a projection. */
  readonly document?: Document | true;
  /**
   * Fair mode: refuse while a live ticket of a cooperative tag came before `ticket` (or, without
   * one, while any does), and take `ticket` (and expired tickets) out of the queue on success.
   */
  readonly fair?: { readonly ticket?: Ticket };
}

/** A waiter's ticket in a fair queue (`lock.queue`). */
export interface Ticket {
  readonly id: string;
  readonly tag: string;
  readonly at: Date;
  readonly exp: Date;
}

/** Expiry of a lock without a lease: the last ms of year 9999. */
export const NEVER = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** The expiry of a lease of `lease` ms stamped at `stamp` (`Infinity`: no expiry). */
export function expiryOf(stamp: number, lease: number): number {
  return Number.isFinite(lease) ? stamp + lease : NEVER;
}

/**
 * The fencing token of a stored lock: its counter, on top of the document's birth time × 1000
 * for resource documents (so that a purged and re-created resource keeps counting upwards).
 */
export function fenceOf(lock: StoredLock): number {
  const born = lock.born instanceof Date ? lock.born.getTime() * 1000 : 0;
  return born + (lock.fence ?? 0);
}

/** A lock an acquisition wrote, with the filter that addresses its document (`{ _id }`). */
export interface Acquired {
  readonly lock: LockData;
  readonly target: Document;
  /**
   * For a lock whose write may still be on its way (its reply was lost): the server time after
   * which the write can no longer land (its stamp plus the tolerance the server checks it with).
   */
  readonly landsBy?: number;
  /** The server's clock when the write that set `lock.expiresAt` was applied (ms). */
  readonly appliedAt?: number;
  /** The locked document after the acquisition, when it was asked for (without the lock field, unless projected). */
  readonly document?: Document;
}

/** The document (its `_id`) whose lock refused an acquisition, when an explanation read it: where to wait. */
const refusedDocuments = new WeakMap<object, unknown>();

/** The `_id` of the document that refused the acquisition `error` reports, if it was read. */
export function refusedDocumentOf(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? refusedDocuments.get(error) : undefined;
}

/** The lock a failed acquisition may have written (its reply was lost), which its `DbError` carries. */
export function lockWrittenBy(error: unknown): Acquired | undefined {
  if (!isLockError(error, 'DbError')) return undefined;
  const lock = (error as { lock?: unknown }).lock;
  return typeof lock === 'object' && lock !== null && 'target' in lock && 'lock' in lock ? (lock as Acquired) : undefined;
}

/** An acquisition that registered a lock which still waits for the tags it is assertive over. */
export class AssertivePending implements Acquired {
  constructor(
    readonly lock: LockData,
    readonly target: Document,
    readonly blockedBy: readonly string[],
    readonly document?: Document,
  ) {}
}

/** The configuration an engine runs with; writeLock and multiLock differ only here. */
export interface EngineSettings {
  readonly store: Store;
  readonly paths: LockPaths;
  readonly rules: ReadonlyMap<string, TagRule>;
  readonly clock: ServerClock;
  /** Subtype of a refused acquisition. */
  readonly conflict: 'LockAlreadyTaken' | 'CooperativeLock';
  /** True for writeLock: a lost lock is `LockWasReacquired` when someone acquired after it. */
  readonly reportsReacquired: boolean;
}

/** How many times a stamped write is tried before the refusal is reported. */
const STAMP_ATTEMPTS = 3;

/**
 * The lock engine behind writeLock, multiLock and resource locks. Every check and write of one
 * call is one atomic `findOneAndUpdate`/`updateOne`; a second round trip (a read) is made only to
 * explain an update that matched nothing. Acquisitions are addressed by the caller's filter;
 * everything after (continue, extend, release, guard) by the locked document's `{ _id }`.
 */
export class LockEngine {
  readonly tags: ReadonlySet<string>;
  /** The locked collection, `db.collection` (for events and logs). */
  readonly namespace: string;

  constructor(private readonly settings: EngineSettings) {
    this.tags = new Set(settings.rules.keys());
    this.namespace = `${settings.store.collection.dbName}.${settings.store.collection.collectionName}`;
  }

  /** The property of each document that holds its lock. */
  get field(): string {
    return this.settings.paths.field;
  }

  /** Subtype of a refused acquisition. */
  get conflict(): 'LockAlreadyTaken' | 'CooperativeLock' {
    return this.settings.conflict;
  }

  /** The client's bounds on the server's clock. */
  get clock(): ServerClock {
    return this.settings.clock;
  }

  /** The rule of a known tag. */
  rule(tag: string): TagRule {
    const rule = this.settings.rules.get(tag);
    if (!rule) throw new TypeError(`Unknown tag \`${tag}\``);
    return rule;
  }

  /**
   * Acquire: takes a new lock of `tag` on the first document matching `filter`.
   *
   * Checks, in one update: no unexpired lock of a tag this one is cooperative with (judged at the
   * stamp, which the same update proves to be at or below `$$NOW`, so a live lock never looks
   * expired), for an exclusive tag a stamp later than its previous acquisition, the stamp within
   * the tolerance below `$$NOW`, and the kind's extra conditions. Writes the entry (replacing an
   * exclusive tag's array, whose entries the check proved expired), +1 on the fence, the server's
   * clock (`$currentDate`), and prunes expired entries of other tags. So two holders of tags
   * cooperative with each other can never both be unexpired by the server's clock.
   *
   * Resolves the lock, or an {@link AssertivePending} when it was registered but tags it is
   * assertive over are still held.
   */
  async acquire(
    filter: Document,
    tag: string,
    lease: number,
    call: ResolvedCallOptions,
    extras: AcquireExtras = {},
  ): Promise<Acquired | AssertivePending> {
    const { paths, conflict } = this.settings;
    const rule = this.rule(tag);
    const id = newLockId();
    return this.withStamp(filter, lease, call, async (stamp, tolerance) => {
      const at = new Date(stamp);
      const exp = new Date(expiryOf(stamp, lease));
      const entry: StoredEntry = { ...extras.entry, id, at, exp };
      const fair = extras.fair;
      const update = mergeUpdates(
        mergeUpdates(
          {
            $inc: { [paths.fence]: 1 },
            $currentDate: { [paths.now]: true },
            $max: { [paths.until]: exp },
            ...(rule.exclusive ? { $set: { [paths.tag(tag)]: [entry] }, $push: recordStamp(paths, tag, at) } : { $push: { [paths.tag(tag)]: entry } }),
            ...this.pruneOthers(tag, at),
          },
          fair ? { $pull: { [paths.queue]: fair.ticket ? { $or: [{ id: fair.ticket.id }, { exp: { $lte: at } }] } : { exp: { $lte: at } } } } : undefined,
        ),
        extras.update?.(at, exp),
      );
      const guarded = allOf(filter, [
        ...rule.cooperative.map((other) => noLiveEntry(paths, other, at)),
        ...(rule.exclusive ? [stampNotBeforeRecent(paths, tag, at)] : []),
        ...(fair && rule.cooperative.length > 0 ? [noEarlierTicket(paths, rule.cooperative, at, fair.ticket)] : []),
        { $expr: stampWithin(at, tolerance) },
        ...(extras.conditions?.(at) ?? []),
      ]);
      let reply: Timed<Document | null>;
      try {
        reply = await this.settings.store.findOneAndUpdate(guarded, update, call, undefined, extras.document);
      } catch (error) {
        const failure = classifyWriteFailure(error);
        if (failure !== 'unknown') throw lockError('DbError', call.boom, { cause: error, detail: `${describeFailure(error)} (${describeWriteFailure(failure, 'lock')})` });
        // The write may have been applied although its reply was lost (a wtimeout, a dropped
        // connection): hand the caller the lock it may hold, so that it can still release it.
        // Its document is found by the lock's id alone: the caller's filter may not match it any more.
        const attempted: LockData = { id, tag, timestamp: stamp, fence: 0, expiresAt: exp.getTime() };
        throw lockError('DbError', call.boom, {
          cause: error,
          detail: `${describeFailure(error)} (the lock may have been written: release err.lock)`,
          lock: { lock: attempted, target: {}, landsBy: stamp + tolerance } satisfies Acquired,
        });
      }
      const doc = reply.value;
      if (!doc) return undefined;
      const now = this.observeWrite(doc, reply);
      const lock = paths.read(doc);
      const target = { _id: doc._id };
      if (!rule.exclusive && hasExpiredEntries(lock, tag, now)) await this.pruneOwnTag(target, tag, new Date(now), call);
      const data: LockData = { id, tag, timestamp: stamp, fence: fenceOf(lock), expiresAt: exp.getTime() };
      const outcome = this.assertiveOutcome(data, target, lock, now);
      return extras.document === undefined ? outcome : withDocument(outcome, documentOf(doc, paths.field, extras.document));
    }, extras.explain === false ? null : (seen, stamp, tolerance) => {
      if (!seen.value) return { retry: false, error: lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' }) };
      const lock = paths.read(seen.value);
      const now = seen.serverNow?.getTime() ?? stamp;
      const holders = rule.cooperative.filter((other) => liveEntries(lock, other, now).length > 0);
      if (holders.length > 0) return { retry: false, error: refused(conflict, `held by tag ${holders.join(', ')}`, seen.value._id) };
      const ahead = extras.fair ? earlierTickets(lock, rule.cooperative, now, extras.fair.ticket).length : 0;
      if (ahead > 0) return { retry: false, error: refused(conflict, `${ahead} waiter(s) came first (fair mode)`, seen.value._id) };
      const latest = rule.exclusive ? Math.max(0, ...(lock.recent?.[tag] ?? []).map((date) => date.getTime())) : 0;
      if (latest > stamp) {
        return { retry: true, why: 'a later acquisition was stamped meanwhile', minStamp: latest, error: lockError(conflict, call.boom, { detail: 'held when the update ran' }) };
      }
      if (stampRefused(seen, stamp, tolerance)) return { retry: true, why: stampLag(seen, stamp, tolerance, lease) };
      const refusal = extras.refusal?.(lock, now);
      return { retry: false, error: refused(conflict, refusal ?? 'held when the update ran', seen.value._id) };
    }, () => lockError(conflict, call.boom, { detail: 'still held' }));

    function refused(subtype: typeof conflict, detail: string, documentId: unknown): Error {
      const error = lockError(subtype, call.boom, { detail });
      refusedDocuments.set(error, documentId);
      return error;
    }
  }

  /**
   * Ticket (fair mode): takes a place in the queue of the first document matching `filter`: a
   * ticket stamped by the server-checked clock, live for `leaseMs` unless renewed. Resolves the
   * ticket and the document's `{ _id }`. A ticket only ever delays acquisitions; it is never a
   * lock, so it cannot admit a second holder, and it is written at `releaseW` (default 1): one
   * rolled back only loses its waiter its place.
   */
  async takeTicket(filter: Document, tag: string, leaseMs: number, call: ResolvedCallOptions): Promise<{ ticket: Ticket; target: Document }> {
    const { paths } = this.settings;
    const id = newLockId();
    return this.withStamp(filter, leaseMs * 2, call, async (stamp, tolerance) => {
      const ticket: Ticket = { id, tag, at: new Date(stamp), exp: new Date(stamp + leaseMs) };
      const reply = await this.settings.store.findOneAndUpdate(
        allOf(filter, [{ $expr: stampWithin(ticket.at, tolerance) }]),
        { $push: { [paths.queue]: ticket }, $currentDate: { [paths.now]: true }, $max: { [paths.until]: ticket.exp } },
        call,
        undefined,
        undefined,
        call.releaseW,
      );
      if (!reply.value) return undefined;
      this.observeWrite(reply.value, reply);
      return { ticket, target: { _id: reply.value._id } };
    }, (seen, stamp, tolerance) => {
      if (!seen.value) return { retry: false, error: lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' }) };
      return { retry: true, why: stampLag(seen, stamp, tolerance, leaseMs * 2) };
    });
  }

  /** Pushes a ticket's end to `leaseMs` after a server-checked stamp; resolves false when it is gone. */
  async renewTicket(target: Document, ticket: Ticket, leaseMs: number, call: ResolvedCallOptions): Promise<boolean> {
    const { paths, clock } = this.settings;
    const at = new Date(clock.lower());
    const renewedTo = new Date(at.getTime() + leaseMs);
    const reply = await this.settings.store.findOneAndUpdate(
      allOf(target, [{ [paths.queue]: { $elemMatch: { id: ticket.id } } }, { $expr: stampWithin(at, clock.tolerance(leaseMs * 2, true)) }]),
      { $set: { [`${paths.queue}.$[mine].exp`]: renewedTo }, $currentDate: { [paths.now]: true }, $max: { [paths.until]: renewedTo } },
      call,
      [{ 'mine.id': ticket.id }],
      undefined,
      call.releaseW,
    );
    if (reply.value) this.observeWrite(reply.value, reply);
    return reply.value !== null;
  }

  /** Leaves the queue (a waiter that gave up). */
  async dropTicket(target: Document, ticket: Ticket, call: ResolvedCallOptions): Promise<void> {
    await this.settings.store.updateOne(target, { $pull: { [this.settings.paths.queue]: { id: ticket.id } } }, call, call.releaseW);
  }

  /**
   * Continue (assertive): checks, by the server's current clock, that `lock` is still in
   * `target` and unexpired (`$$NOW`), and prunes expired entries; then reports whether the tags it
   * is assertive over are gone. Writes nothing else, so it can never admit another holder.
   */
  async resume(target: Document, lock: LockData, call: ResolvedCallOptions, document?: Document | true): Promise<Acquired | AssertivePending> {
    const { paths } = this.settings;
    const rule = this.rule(lock.tag);
    return this.withStamp(target, rule.lease, call, async (stamp, tolerance) => {
      const at = new Date(stamp);
      const guarded = allOf(target, [{ $expr: { $and: [entryLiveOnServer(paths, lock.tag, { id: lock.id }), stampWithin(at, tolerance)] } }]);
      const reply = await this.settings.store.findOneAndUpdate(guarded, { $pull: pruneTags(paths, this.tags, at), $currentDate: { [paths.now]: true } }, call, undefined, document);
      const doc = reply.value;
      if (!doc) return undefined;
      const now = this.observeWrite(doc, reply);
      const stored = paths.read(doc);
      const own = stored.tags?.[lock.tag]?.find((entry) => entry.id === lock.id);
      const data: LockData = { ...lock, expiresAt: own?.exp.getTime() ?? lock.expiresAt };
      const outcome = this.assertiveOutcome(data, { _id: doc._id }, stored, now);
      return document === undefined ? outcome : withDocument(outcome, documentOf(doc, paths.field, document));
    }, (seen, stamp, tolerance) => this.explainLost(seen, lock, { id: lock.id }, call, stamp, tolerance, rule.lease));
  }

  /**
   * Release: removes the lock identified by `proof` from `target` (also when its lease ran out,
   * as long as it is still there). Without a proof (writeLock only), monglock v2's forced release
   * of the tag. It prunes nothing else: it has no stamp the server checked, and a bound it had not
   * checked (a time from a former primary, say) could remove a live entry. Removing one's own
   * entry can only free a lock, never admit two holders. Sent at `releaseW` (default 1): rolled
   * back, it only leaves the lock held until its lease ends.
   *
   * With `update` (the caller's final write of its critical section), the same atomic update also
   * applies it, and only while the lock is held and unexpired by `$$NOW`: the write and the
   * release happen together or not at all. Sent at `w`, and at least at majority: it carries
   * data, and it is what makes a section acquired at `w: 1` safe (see "Write concerns").
   */
  async release(
    target: Document,
    tag: string,
    proof: Proof | undefined,
    claimed: LockData | undefined,
    call: ResolvedCallOptions,
    update?: Document,
  ): Promise<void> {
    const { paths, store } = this.settings;
    if (!proof) {
      const forced = { $set: { [paths.tag(tag)]: [] } };
      const matched = await this.db(call, () => store.updateOne(target, forced, call, call.releaseW));
      if (!matched) throw lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' });
      return;
    }
    const match = proofMatch(proof);
    const conditions = [hasEntry(paths, tag, match), ...this.uniquely(tag, proof), ...(update ? this.commitConditions(tag, proof) : [])];
    const record = update && 'id' in proof ? commitRecord(proof.id, this.settings.clock, call.timeout) : undefined;
    const write = mergeUpdates(mergeUpdates(update ?? {}, { $pull: { [paths.tag(tag)]: match } }), record && { $push: recordCommit(paths, record) });
    let matched: boolean;
    try {
      matched = await this.db(call, () => store.updateOne(allOf(target, conditions), write, call, update ? dataWriteConcern(call.w) : call.releaseW));
    } catch (error) {
      if (!update || !isLockError(error, 'DbError')) throw error;
      if (record) {
        const lock = claimed ?? { id: record.lock, tag, timestamp: 0, fence: 0, expiresAt: 0 };
        const settlement = { store, paths, clock: this.settings.clock, w: dataWriteConcern(call.w), readClock: () => this.readClock({}, call) };
        return settleCommit(settlement, target, { lock, record }, error, call);
      }
      // A v2 timestamp proof: no record of the commit to read back.
      const refused = classifyWriteFailure(error.cause) !== 'unknown';
      throw lockError('DbError', call.boom, {
        cause: error.cause,
        detail: `${error.message}; ${refused ? 'the update was not applied (the lock is still held)' : 'whether the update was applied is unknown (a timestamp proof leaves no record: use the handle)'}`,
        data: { applied: refused ? false : 'unknown' },
      });
    }
    if (matched) return;
    const seen = await this.db(call, () => store.inspect(target, call));
    const lost = this.explainLost(seen, claimed ?? { id: '', tag, timestamp: 0, fence: 0, expiresAt: 0 }, proof, call, 0, 0, 0, update !== undefined);
    throw lost.error ?? lockError('LockNotFound', call.boom, { detail: 'the lock is not held' });
  }

  /**
   * What a commit must also check: the lock is unexpired by `$$NOW`, and every tag it asserts over
   * is gone (an assertive registration still waiting for readers may not write under them).
   */
  private commitConditions(tag: string, proof: Proof): Document[] {
    const { paths } = this.settings;
    const asserted = this.rule(tag).assertive.map((other) => noEntryLiveOnServer(paths, other));
    return [{ $expr: asserted.length > 0 ? { $and: [entryLiveOnServer(paths, tag, proof), ...asserted] } : entryLiveOnServer(paths, tag, proof) }];
  }

  /**
   * Extend: pushes a held lock's expiry to `lease` ms after a stamp, in one update that checks
   * that the lock is still in `target` and unexpired by `$$NOW` and that the stamp is within the
   * tolerance below `$$NOW` (and, for a v2 timestamp proof, that it names one lock). A lost lock
   * is never re-created. Resolves the lock with its new expiry, in its document (`{ _id }`).
   */
  async extend(
    target: Document,
    lock: LockData,
    proof: Proof,
    lease: number,
    call: ResolvedCallOptions,
    extraUpdate?: (stamp: Date, exp: Date) => Document,
    update?: Document,
  ): Promise<Acquired> {
    const { paths } = this.settings;
    return this.withStamp(target, lease, call, async (stamp, tolerance) => {
      const at = new Date(stamp);
      const live = { $and: [entryLiveOnServer(paths, lock.tag, proof), stampWithin(at, tolerance)] };
      const guarded = allOf(target, [{ $expr: live }, ...this.uniquely(lock.tag, proof), ...(update ? this.commitConditions(lock.tag, proof) : [])]);
      const exp = new Date(expiryOf(stamp, lease));
      const write = mergeUpdates(
        mergeUpdates(update ?? {}, {
          $set: { [`${paths.tag(lock.tag)}.$[mine].exp`]: exp },
          $currentDate: { [paths.now]: true },
          $max: { [paths.until]: exp },
          ...this.pruneOthers(lock.tag, at),
        }),
        extraUpdate?.(at, exp),
      );
      const arrayFilters = [prefixed('mine', proofMatch(proof))];
      const reply = await this.settings.store.findOneAndUpdate(guarded, write, call, arrayFilters, undefined, update ? dataWriteConcern(call.w) : call.w);
      if (!reply.value) return undefined;
      const appliedAt = this.observeWrite(reply.value, reply);
      return { lock: { ...lock, expiresAt: exp.getTime() }, target: { _id: reply.value._id }, appliedAt };
    }, (seen, stamp, tolerance) => this.explainLost(seen, lock, proof, call, stamp, tolerance, lease, update !== undefined));
  }

  /** Reads the server's clock (`$$NOW`, beside the first document `target` selects) into the bounds. */
  async readClock(target: Document, call: ResolvedCallOptions): Promise<void> {
    const seen = await this.db(call, () => this.settings.store.inspect(target, call));
    if (seen.serverNow) this.settings.clock.observe(seen.serverNow, seen.sentAt, seen.arrivedAt);
  }

  /** A filter that matches `target` only while the lock is held and unexpired by the server's clock. */
  guard(target: Document, lock: LockData, extra?: Document): Document {
    const live = { $expr: entryLiveOnServer(this.settings.paths, lock.tag, { id: lock.id }) };
    return allOf(target, [live, ...(extra ? [extra] : [])]);
  }

  /** For a monglock v2 timestamp proof: the condition that it names exactly one lock of `tag`. */
  private uniquely(tag: string, proof: Proof): Document[] {
    return 'timestamp' in proof ? [{ $expr: timestampUnique(this.settings.paths, tag, proof.timestamp) }] : [];
  }

  /** Learns the server's clock from a write's reply (`$currentDate` of `lock.now`); returns it, in ms. */
  private observeWrite(doc: Document, reply: Timed<unknown>): number {
    const now = this.settings.paths.read(doc).now;
    if (!(now instanceof Date)) throw new Error(`The server did not return \`${this.settings.paths.now}\` ($currentDate)`);
    this.settings.clock.observe(now, reply.sentAt, reply.arrivedAt);
    return now.getTime();
  }

  private assertiveOutcome(data: LockData, target: Document, lock: StoredLock, now: number): Acquired | AssertivePending {
    const blockedBy = this.rule(data.tag).assertive.filter((other) => liveEntries(lock, other, now).length > 0);
    return blockedBy.length > 0 ? new AssertivePending(data, target, blockedBy) : { lock: data, target };
  }

  /** `$pull` of the expired entries of every tag but `tag` (whose array the update writes), and of the commit records kept until `at`. */
  private pruneOthers(tag: string, at: Date): { $pull: Document } {
    const others = [...this.tags].filter((other) => other !== tag);
    return { $pull: { ...pruneTags(this.settings.paths, others, at), ...pruneCommits(this.settings.paths, at) } };
  }

  /**
   * A shared tag's array cannot be pruned by the update that pushes onto it (MongoDB refuses two
   * operators on one path), so when the reply shows expired entries there, one more update
   * removes them. Garbage collection only: its failure does not fail the acquisition.
   */
  private async pruneOwnTag(target: Document, tag: string, at: Date, call: ResolvedCallOptions): Promise<void> {
    try {
      await this.settings.store.updateOne(target, { $pull: pruneTags(this.settings.paths, [tag], at) }, call);
    } catch {
      // Left for the next write to prune.
    }
  }

  /**
   * Explains why a write that needed `lock` matched nothing. If the lock is still live by the
   * server's clock, the update can only have failed on its stamp: retry.
   */
  private explainLost(seen: Inspection, lock: LockData, proof: Proof, call: ResolvedCallOptions, stamp = 0, tolerance = 0, lease = 0, withUpdate = false): Verdict {
    if (!seen.value) return { retry: false, error: lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' }) };
    const stored = this.settings.paths.read(seen.value);
    if ('timestamp' in proof && ambiguous(stored, lock.tag, proof.timestamp)) {
      const detail = `two locks of this document were taken in the ms ${proof.timestamp}, so a timestamp cannot tell them apart: use the handle (or its id)`;
      return { retry: false, error: lockError('LockNotFound', call.boom, { detail }) };
    }
    const entries = stored.tags?.[lock.tag] ?? [];
    const own = entries.find((entry) => matchesProof(entry, proof));
    if (own && withUpdate) {
      // A write that carries an update also needs the tags this lock asserts over to be gone.
      const asserted = this.rule(lock.tag).assertive.filter((other) => liveEntries(stored, other, seen.serverNow?.getTime() ?? 0).length > 0);
      if (asserted.length > 0) {
        const detail = `the update was not applied: tag ${asserted.join(', ')}, which this lock asserts over, is still held (continue the acquisition first)`;
        return { retry: false, error: lockError('AssertiveLock', call.boom, { detail }) };
      }
    }
    if (own && seen.serverNow && own.exp.getTime() > seen.serverNow.getTime()) return { retry: true, why: stampLag(seen, stamp, tolerance, lease) };
    // Reacquired: the document has issued a later lock than this one (its fence moved on). A lock
    // whose reply was lost has no known fence (0): nothing tells whether anyone acquired after it.
    const takenOver = !own && ('timestamp' in proof || (lock.fence > 0 && fenceOf(stored) > lock.fence));
    const subtype: LockErrorSubtype = this.settings.reportsReacquired && takenOver ? 'LockWasReacquired' : 'LockNotFound';
    const detail = `${own ? 'the lock expired' : 'the lock is not held'}${withUpdate ? '; the update was not applied' : ''}`;
    return { retry: false, error: lockError(subtype, call.boom, { detail }) };
  }

  /**
   * Runs a stamped write: stamps from the lower bound of the server's clock, checked by the
   * server in the same update. When it matches nothing, reads the document and the server's
   * clock (which also tightens the bounds); `explain` says which error that is, or that the
   * stamp was refused, in which case the write is tried again with a fresh stamp and the wide
   * tolerance. Without `explain`, a write that matched nothing throws `unexplained()` at once.
   */
  private async withStamp<T>(
    target: Document,
    lease: number,
    call: ResolvedCallOptions,
    write: (stamp: number, tolerance: number) => Promise<T | undefined>,
    explain: ((seen: Inspection, stamp: number, tolerance: number) => Verdict) | null,
    unexplained?: () => Error,
  ): Promise<T> {
    const { clock, store } = this.settings;
    let relaxed = false;
    let minStamp = 0;
    for (let attempt = 1; ; attempt++) {
      const stamp = Math.max(clock.lower(), minStamp);
      const tolerance = clock.tolerance(lease, relaxed);
      const result = await this.db(call, () => write(stamp, tolerance));
      if (result !== undefined) return result;
      if (!explain) throw unexplained?.() ?? new Error('refused');
      const seen = await this.db(call, () => store.inspect(target, call));
      if (seen.serverNow) clock.observe(seen.serverNow, seen.sentAt, seen.arrivedAt);
      const verdict = explain(seen, stamp, tolerance);
      if (!verdict.retry) throw verdict.error;
      if (attempt === STAMP_ATTEMPTS) {
        throw verdict.error ?? lockError('DbError', call.boom, { detail: `the server refused the lock's time stamp ${STAMP_ATTEMPTS} times: ${verdict.why}` });
      }
      relaxed = true;
      minStamp = verdict.minStamp ?? 0;
    }
  }

  /** Runs a database step; a driver failure or deadline becomes `DbError` with the failure as `cause`. */
  private db<T>(call: ResolvedCallOptions, step: () => Promise<T>): Promise<T> {
    return withDbErrors(call.boom, step);
  }
}

function describeFailure(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The write concern of a write that carries the caller's data: `w`, or majority when `w` is 1. */
function dataWriteConcern(w: ResolvedCallOptions['w']): ResolvedCallOptions['w'] {
  return w === 1 ? 'majority' : w;
}

/** `outcome` carrying the locked document. */
function withDocument(outcome: Acquired | AssertivePending, document: Document): Acquired | AssertivePending {
  if (outcome instanceof AssertivePending) return new AssertivePending(outcome.lock, outcome.target, outcome.blockedBy, document);
  return { ...outcome, document };
}

/** The document as the caller asked for it: without the lock's `field` unless its projection names it, without `_id` if it excluded it. */
function documentOf(doc: Document, field: string, asked: Document | true): Document {
  const rest: Document = { ...doc };
  if (asked === true || !Object.entries(asked).some(([path, mode]) => mode && namesField(path, field))) delete rest[field];
  if (asked !== true && '_id' in asked && !asked._id) delete rest._id;
  return rest;
}

/** Merges two update documents operator by operator. */
export function mergeUpdates(base: Document, extra: Document | undefined): Document {
  if (!extra) return base;
  const merged: Document = { ...base };
  for (const [operator, fields] of Object.entries(extra)) merged[operator] = { ...(merged[operator] as Document | undefined), ...(fields as Document) };
  return merged;
}

function prefixed(name: string, match: Document): Document {
  return Object.fromEntries(Object.entries(match).map(([key, value]) => [`${name}.${key}`, value]));
}
