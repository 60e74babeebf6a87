import { randomBytes } from 'node:crypto';
import type { Document } from 'mongodb';
import { lockError, withDbErrors, type LockErrorSubtype } from './errors';
import type { LockData } from './lock-handle';
import type { ResolvedCallOptions } from './options';
import type { TagRule } from './relationships';
import { ServerClock, stampTolerance } from './server-clock';
import type { Inspection, Store } from './store';
import {
  allOf,
  entryLiveOnServer,
  hasEntry,
  hasExpiredEntries,
  liveEntries,
  LockPaths,
  noLiveEntry,
  pruneTags,
  stampWithin,
  type StoredEntry,
  type StoredLock,
} from './stored-format';

/** What a lock kind adds to an acquisition (resource locks: owner details, limits, GC date). */
export interface AcquireExtras {
  /** Extra fields stored in the entry. */
  readonly entry?: Document;
  /** Extra filter clauses, given the stamp. */
  readonly conditions?: (stamp: Date) => Document[];
  /** Extra update operators (never on the tag arrays), given the stamp and the expiry. */
  readonly update?: (stamp: Date, exp: Date) => Document;
  /**
   * When false, a refusal is reported as a conflict without the read that explains it (one
   * command instead of two): for retries while waiting, once a refusal has been explained.
   */
  readonly explain?: boolean;
}

/** Expiry of a lock without a lease: the last ms of year 9999. */
export const NEVER = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** The expiry of a lease of `lease` ms stamped at `stamp` (`Infinity`: no expiry). */
export function expiryOf(stamp: number, lease: number): number {
  return Number.isFinite(lease) ? stamp + lease : NEVER;
}

/** The fencing token stored in a lock: its epoch (resource documents) plus its counter. */
export function fenceOf(lock: StoredLock): number {
  return (lock.epoch ?? 0) + (lock.fence ?? 0);
}

/** How a caller proves it owns a lock: its id, or (monglock v2 writeLock) its acquisition timestamp. */
export type Proof = { readonly id: string } | { readonly timestamp: number };

/** An acquisition that registered a lock which still waits for the tags it is assertive over. */
export class AssertivePending {
  constructor(readonly lock: LockData, readonly blockedBy: readonly string[]) {}
}

/** Why a write matched nothing: the error to report, and whether a fresh stamp may succeed. */
interface Verdict {
  readonly retry: boolean;
  readonly error: Error;
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

const STAMP_ATTEMPTS = 3;

/**
 * The lock engine behind writeLock, multiLock and resource locks. Every check and write of one
 * call is one atomic `findOneAndUpdate`/`updateOne`; a second round trip (a read) is made only to
 * explain an update that matched nothing.
 */
export class LockEngine {
  readonly tags: ReadonlySet<string>;

  constructor(private readonly settings: EngineSettings) {
    this.tags = new Set(settings.rules.keys());
  }

  /** Subtype of a refused acquisition. */
  get conflict(): 'LockAlreadyTaken' | 'CooperativeLock' {
    return this.settings.conflict;
  }

  /** The current estimate of the server's clock, ms since the epoch. */
  now(): number {
    return this.settings.clock.stamp();
  }

  /** The rule of a known tag. */
  rule(tag: string): TagRule {
    const rule = this.settings.rules.get(tag);
    if (!rule) throw new TypeError(`Unknown tag \`${tag}\``);
    return rule;
  }

  /**
   * Takes a new lock of `tag` on the first document matching `filter`. Resolves the lock, or an
   * {@link AssertivePending} when it was registered but tags it is assertive over are still held.
   */
  async acquire(
    filter: Document,
    tag: string,
    lease: number,
    call: ResolvedCallOptions,
    extras: AcquireExtras = {},
  ): Promise<LockData | AssertivePending> {
    const { paths, conflict } = this.settings;
    const rule = this.rule(tag);
    const id = randomBytes(16).toString('hex');
    return this.withStamp(filter, call, async (stamp) => {
      const at = new Date(stamp);
      const exp = new Date(expiryOf(stamp, lease));
      const entry: StoredEntry = { ...extras.entry, id, at, exp };
      const update = mergeUpdates(
        {
          $inc: { [paths.fence]: 1 },
          ...(rule.exclusive ? { $set: { [paths.tag(tag)]: [entry] } } : { $push: { [paths.tag(tag)]: entry } }),
          ...this.pruneOthers(tag, at),
        },
        extras.update?.(at, exp),
      );
      const guarded = allOf(filter, [
        ...rule.cooperative.map((other) => noLiveEntry(paths, other, at)),
        { $expr: stampWithin(at, stampTolerance(lease)) },
        ...(extras.conditions?.(at) ?? []),
      ]);
      let doc: Document | null;
      try {
        doc = await this.settings.store.findOneAndUpdate(guarded, update, call);
      } catch (error) {
        // The write may have been applied although its reply was lost (a wtimeout, a dropped
        // connection): hand the caller the lock it may hold, so that it can still release it.
        const attempted: LockData = { id, tag, timestamp: stamp, fence: 0, expiresAt: exp.getTime() };
        throw lockError('DbError', call.boom, { cause: error, detail: `${describeFailure(error)} (the lock may have been written: release err.lock)`, lock: attempted });
      }
      if (!doc) return undefined;
      const lock = paths.read(doc);
      if (!rule.exclusive && hasExpiredEntries(lock, tag, stamp)) await this.pruneOwnTag(doc, tag, at, call);
      const data: LockData = { id, tag, timestamp: stamp, fence: fenceOf(lock), expiresAt: exp.getTime() };
      return this.assertiveOutcome(data, lock, stamp);
    }, extras.explain === false ? null : (seen, stamp) => {
      if (!seen.doc) return { retry: false, error: lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' }) };
      const lock = paths.read(seen.doc);
      const now = seen.serverNow?.getTime() ?? stamp;
      const holders = rule.cooperative.filter((other) => liveEntries(lock, other, now).length > 0);
      const detail = holders.length > 0 ? `held by tag ${holders.join(', ')}` : 'held when the update ran';
      return { retry: stampSuspect(seen, stamp, lease), error: lockError(conflict, call.boom, { detail }) };
    }, () => lockError(conflict, call.boom, { detail: 'still held' }));
  }

  /**
   * Continues an assertive acquisition: checks, by the current time, that `lock` is still held
   * and unexpired and whether the tags it is assertive over are gone.
   */
  async resume(filter: Document, lock: LockData, call: ResolvedCallOptions): Promise<LockData | AssertivePending> {
    const { paths } = this.settings;
    const rule = this.rule(lock.tag);
    return this.withStamp(filter, call, async (stamp) => {
      const at = new Date(stamp);
      const guarded = allOf(filter, [{ $expr: { $and: [entryLiveOnServer(paths, lock.tag, { id: lock.id }), stampWithin(at, stampTolerance(rule.lease))] } }]);
      const doc = await this.settings.store.findOneAndUpdate(guarded, { $pull: pruneTags(paths, this.tags, at) }, call);
      if (!doc) return undefined;
      const stored = paths.read(doc);
      const own = stored.tags?.[lock.tag]?.find((entry) => entry.id === lock.id);
      const data: LockData = { ...lock, expiresAt: own?.exp.getTime() ?? lock.expiresAt };
      return this.assertiveOutcome(data, stored, stamp);
    }, (seen) => this.explainLost(seen, lock, { id: lock.id }, call));
  }

  /**
   * Releases a lock: with a proof, exactly that lock (also when its lease ran out, as long as
   * nobody took it over); without one (writeLock only), monglock v2's forced release of the tag.
   */
  async release(filter: Document, tag: string, proof: Proof | undefined, claimed: LockData | undefined, call: ResolvedCallOptions): Promise<void> {
    const { paths, store, clock } = this.settings;
    const pruneBound = clock.lastAccepted();
    const at = pruneBound > 0 ? new Date(pruneBound) : undefined;
    const others = at ? this.pruneOthers(tag, at) : {};
    if (!proof) {
      const matched = await this.db(call, () => store.updateOne(filter, { $set: { [paths.tag(tag)]: [] }, ...others }, call));
      if (!matched) throw lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' });
      return;
    }
    const match = proofMatch(proof);
    const pull = at ? { $or: [match, { exp: { $lte: at } }] } : match;
    const update = { ...others, $pull: { ...(others.$pull ?? {}), [paths.tag(tag)]: pull } };
    const matched = await this.db(call, () => store.updateOne(allOf(filter, [hasEntry(paths, tag, match)]), update, call));
    if (matched) return;
    const seen = await this.db(call, () => store.inspect(filter, call));
    throw this.explainLost(seen, claimed ?? { id: '', tag, timestamp: 0, fence: 0, expiresAt: 0 }, proof, call).error;
  }

  /** Pushes a held lock's lease to `lease` ms from the server's now. Resolves the new expiry. */
  async extend(
    filter: Document,
    lock: LockData,
    proof: Proof,
    lease: number,
    call: ResolvedCallOptions,
    extraUpdate?: (stamp: Date, exp: Date) => Document,
  ): Promise<LockData> {
    const { paths } = this.settings;
    return this.withStamp(filter, call, async (stamp) => {
      const at = new Date(stamp);
      const guarded = allOf(filter, [{ $expr: { $and: [entryLiveOnServer(paths, lock.tag, proof), stampWithin(at, stampTolerance(lease))] } }]);
      const exp = new Date(expiryOf(stamp, lease));
      const update = mergeUpdates(
        { $set: { [`${paths.tag(lock.tag)}.$[mine].exp`]: exp }, ...this.pruneOthers(lock.tag, at) },
        extraUpdate?.(at, exp),
      );
      const arrayFilters = [prefixed('mine', proofMatch(proof))];
      const doc = await this.settings.store.findOneAndUpdate(guarded, update, call, arrayFilters);
      if (!doc) return undefined;
      return { ...lock, expiresAt: exp.getTime() };
    }, (seen) => this.explainLost(seen, lock, proof, call));
  }

  /** A filter that matches the document only while the lock is held and unexpired by server time. */
  guard(filter: Document, lock: LockData, extra?: Document): Document {
    const live = { $expr: entryLiveOnServer(this.settings.paths, lock.tag, { id: lock.id }) };
    return allOf(filter, [live, ...(extra ? [extra] : [])]);
  }

  private assertiveOutcome(data: LockData, lock: StoredLock, stamp: number): LockData | AssertivePending {
    const blockedBy = this.rule(data.tag).assertive.filter((other) => liveEntries(lock, other, stamp).length > 0);
    return blockedBy.length > 0 ? new AssertivePending(data, blockedBy) : data;
  }

  /** `$pull` of the expired entries of every tag but `tag` (whose array the update writes). */
  private pruneOthers(tag: string, at: Date): { $pull?: Document } {
    const others = [...this.tags].filter((other) => other !== tag);
    return others.length > 0 ? { $pull: pruneTags(this.settings.paths, others, at) } : {};
  }

  /**
   * A shared tag's array cannot be pruned by the update that pushes onto it (MongoDB refuses two
   * operators on one path), so when the reply shows expired entries there, one more update
   * removes them. Garbage collection only: its failure does not fail the acquisition.
   */
  private async pruneOwnTag(doc: Document, tag: string, at: Date, call: ResolvedCallOptions): Promise<void> {
    try {
      await this.settings.store.updateOne({ _id: doc._id }, { $pull: pruneTags(this.settings.paths, [tag], at) }, call);
    } catch {
      // Left for the next write to prune.
    }
  }

  /**
   * Explains why a write that needed `lock` matched nothing. If the lock is still live by the
   * server's clock, the update can only have failed on its stamp: retry.
   */
  private explainLost(seen: Inspection, lock: LockData, proof: Proof, call: ResolvedCallOptions): Verdict {
    if (!seen.doc) return { retry: false, error: lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' }) };
    const stored = this.settings.paths.read(seen.doc);
    const entries = stored.tags?.[lock.tag] ?? [];
    const own = entries.find((entry) => matchesProof(entry, proof));
    if (own && seen.serverNow && own.exp.getTime() > seen.serverNow.getTime()) return { retry: true, error: stampRefused(call) };
    // Reacquired: the document has issued a later lock than this one (its fence moved on).
    const takenOver = !own && ('timestamp' in proof || fenceOf(stored) > lock.fence);
    const subtype: LockErrorSubtype = this.settings.reportsReacquired && takenOver ? 'LockWasReacquired' : 'LockNotFound';
    return { retry: false, error: lockError(subtype, call.boom, { detail: own ? 'the lock expired' : 'the lock is not held' }) };
  }

  /**
   * Runs a stamped write. When it matches nothing, reads the document and the server's clock
   * (which also corrects the clock estimate); `explain` says which error that is, and whether the
   * stamp may have been refused, in which case the write is tried again with a fresh stamp.
   * Without `explain`, a write that matched nothing throws `unexplained()` at once (no read).
   */
  private async withStamp<T>(
    filter: Document,
    call: ResolvedCallOptions,
    write: (stamp: number) => Promise<T | undefined>,
    explain: ((seen: Inspection, stamp: number) => Verdict) | null,
    unexplained?: () => Error,
  ): Promise<T> {
    const { clock, store } = this.settings;
    for (let attempt = 1; ; attempt++) {
      const stamp = clock.stamp();
      const result = await this.db(call, () => write(stamp));
      if (result !== undefined) {
        clock.accepted(stamp);
        return result;
      }
      if (!explain) throw unexplained?.() ?? new Error('refused');
      const seen = await this.db(call, () => store.inspect(filter, call));
      if (seen.serverNow) clock.observe(seen.serverNow, seen.arrivedAt);
      const verdict = explain(seen, stamp);
      if (!verdict.retry || attempt === STAMP_ATTEMPTS) throw verdict.error;
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

/**
 * True when `stamp` may have failed the server's window check: it is ahead of the server's
 * clock, or further behind it than the tolerance (judged at the later inspection, so generously).
 */
function stampSuspect(seen: Inspection, stamp: number, lease: number): boolean {
  if (!seen.serverNow) return false;
  const now = seen.serverNow.getTime();
  return stamp > now || stamp < now - stampTolerance(lease);
}

function stampRefused(call: ResolvedCallOptions): Error {
  return lockError('DbError', call.boom, {
    detail: `the server refused the lock's time stamp ${STAMP_ATTEMPTS} times (is a clock jumping, or the server overloaded?)`,
  });
}

function proofMatch(proof: Proof): Document {
  if ('id' in proof) return { id: proof.id };
  return { at: { $gte: new Date(proof.timestamp), $lt: new Date(proof.timestamp + 1) } };
}

function matchesProof(entry: StoredEntry, proof: Proof): boolean {
  if ('id' in proof) return entry.id === proof.id;
  const at = entry.at instanceof Date ? entry.at.getTime() : NaN;
  return at >= proof.timestamp && at < proof.timestamp + 1;
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
