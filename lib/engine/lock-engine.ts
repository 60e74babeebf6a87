import type { Document } from 'mongodb';
import { LeaseBatches } from './lease-scheduler';
import { isLockError, lockError, type ConflictSubtype } from '../common/errors';
import { withPriority, type CommandPriority, type ResolvedCallOptions } from '../common/options';
import { acquireOperation, type AcquireExtension } from '../protocol/acquire';
import { extendOperation } from '../protocol/extend';
import { guardFilter } from '../protocol/guard';
import { fenceOf, type ClaimedLock, type LockData, type TagRule, type Ticket } from '../protocol/lock-data';
import { newLockId } from '../protocol/lock-ids';
import type { LockOperation } from '../protocol/operation';
import type { Proof } from '../protocol/proofs';
import { pruneTagOperation } from '../protocol/prune';
import type { OwnedAcquisition } from '../protocol/reentry';
import type { ServerClock } from '../protocol/server-clock';
import { allOf, hasExpiredEntries, liveEntries, type LockPaths, type StoredLock } from '../protocol/stored-format';
import { liveQuarantine, notQuarantined } from '../protocol/quarantine';
import { AssertivePending, landing, withDocument, type Acquired } from './acquired';
import { FairTickets } from './fair-tickets';
import { handOver, withdrawHandOver, type GranteeTerms } from './hand-over';
import { DATA_WRITE_CONCERN } from './commit-outcome';
import { releaseLock, type LockRelease, type ReleaseWrite } from './release';
import { explainLostLock, explainRefusedAcquisition, unexplainedRefusal, type AcquireContext } from './refusals';
import { prunedAt } from '../protocol/rate-window';
import { holdsMinHold, withoutMinHold } from '../protocol/min-hold';
import { observeWrite, readClock, refuseExcessSkew, runStamped, type StampedWrite } from './stamped-write';
import type { Inspection, Store, Timed } from './store';
import { failedAcquisition } from './write-failures';
import { inTransaction, type FinalWrite } from '../common/write-params';
import { idNamedBy } from '../common/validation';
import { DeploymentView, type DeploymentProbe } from './deployment';
import { continueRegistration } from './continuation';

/** What a lock kind adds to an acquisition, and how the engine reports it. */
export interface AcquireExtras extends AcquireExtension {
  /** Why the kind's conditions refuse `lock` at server time `now` (ms), if they do: the refusal's detail. */
  readonly refusal?: (lock: StoredLock, now: number) => string | undefined;
  /** When false, a refusal is reported as a conflict without the read that explains it (retries while waiting). */
  readonly explain?: boolean;
  /** Return the locked document too: `true` all of it, or a projection. */
  readonly document?: Document | true;
  /** Fair mode: refuse while a live ticket of a cooperative tag came first; take `ticket` out of the queue on success. */
  readonly fair?: { readonly ticket?: Ticket };
  /** For a tag with a limit: the permits to take (default 1). */
  readonly permits?: number;
  /** An owner's first hold (reentrant locks): the owner, and the fencing counter it read. */
  readonly owned?: OwnedAcquisition;
  /** ms of minimum hold (lib/protocol/min-hold.ts). */
  readonly minHold?: number;
}

/** Below this many ms left of its lease (by the upper bound of the server's clock), a plain release is a cleanup, sent after extensions (lib/engine/command-gate.ts). */
const ENDING_LEASE_MS = 250;

/** The configuration an engine runs with; writeLock and multiLock differ only here. */
export interface EngineSettings {
  readonly store: Store;
  readonly paths: LockPaths;
  readonly rules: ReadonlyMap<string, TagRule>;
  readonly clock: ServerClock;
  /** Subtype of a refused acquisition. */
  readonly conflict: ConflictSubtype;
  /** True for writeLock: a lost lock is `LockWasReacquired` when someone acquired after it. */
  readonly reportsReacquired: boolean;
  /** The deployment behind the collection (its clocks' skew, its shard key), learned before the first write. */
  readonly deployment: DeploymentProbe;
}

/**
 * The lock engine behind writeLock, multiLock and resource locks: it sends the protocol's
 * operations (lib/protocol), feeds the client's bounds on the server's clock from their replies,
 * retries a refused stamp, and explains a refusal with one read. Acquisitions are addressed by the
 * caller's filter; everything after (continue, extend, release, guard) by the locked document's
 * address: its `_id` and, on a sharded collection, its shard key values ({@link addressOf}).
 */
export class LockEngine {
  readonly tags: ReadonlySet<string>;
  /** The locked collection, `db.collection` (for events and logs). */
  readonly namespace: string;

  /** The fair queue's tickets, in the same documents. */
  readonly tickets: FairTickets;
  /** The deployment behind the collection: its clocks' skew, and how a locked document is addressed. */
  readonly deployment: DeploymentView;
  /** The lease keepers' plain extensions, sent in batches (lib/engine/lease-scheduler.ts). */
  readonly leaseBatches: LeaseBatches;

  constructor(private readonly settings: EngineSettings) {
    this.tags = new Set(settings.rules.keys());
    this.deployment = new DeploymentView(settings.deployment, settings.clock, settings.store);
    this.tickets = new FairTickets(settings, (call) => this.deployment.ready(call));
    this.namespace = `${settings.store.collection.dbName}.${settings.store.collection.collectionName}`;
    this.leaseBatches = new LeaseBatches(this);
  }

  get field(): string {
    return this.settings.paths.field;
  }

  get paths(): LockPaths {
    return this.settings.paths;
  }

  get conflict(): ConflictSubtype {
    return this.settings.conflict;
  }

  get clock(): ServerClock {
    return this.settings.clock;
  }

  get store(): Store {
    return this.settings.store;
  }

  /** The rule of a known tag. */
  rule(tag: string): TagRule {
    const rule = this.settings.rules.get(tag);
    if (!rule) throw new TypeError(`Unknown tag \`${tag}\``);
    return rule;
  }

  /**
   * Acquire ({@link acquireOperation}): resolves the lock, or an {@link AssertivePending} when it
   * was registered but tags it is assertive over are still held. A lost reply rejects with a
   * `DbError` carrying the lock that may have been written (`err.lock`).
   */
  async acquire(filter: Document, tag: string, lease: number, call: ResolvedCallOptions, extras: AcquireExtras = {}): Promise<Acquired | AssertivePending> {
    const { paths, store, conflict } = this.settings;
    const rule = this.rule(tag);
    const id = newLockId();
    const permits = rule.limit === undefined ? undefined : (extras.permits ?? 1);
    const { owned } = extras;
    const window = rule.limit === undefined ? undefined : extras.minHold; // a rate limit's (lib/protocol/rate-window.ts)
    const context: AcquireContext = { paths, rule, conflict, lease, permits, owned, boom: call.boom, fair: extras.fair, refusal: extras.refusal, window };
    return this.stamped(call, {
      target: filter,
      ...explainFirstOf(filter, paths),
      lease,
      write: async (stamp, tolerance) => {
        const entry = { id, at: new Date(stamp), exp: new Date(this.settings.clock.expiry(stamp, lease)) };
        const held = extras.minHold === undefined ? {} : { minHoldUntil: this.settings.clock.expiry(stamp, extras.minHold) }; // the hold's end is stored as a lease's
        const operation = acquireOperation({ paths, rule, tags: this.tags, filter, entry, tolerance, fair: extras.fair, permits, owned, extension: extras, minHold: extras.minHold, holdUntil: held.minHoldUntil === undefined ? undefined : new Date(held.minHoldUntil) });
        let reply: Timed<Document | null>;
        try {
          // An exclusive tag without assertive ones reads back only its token and the clock (the narrowest reply).
          reply = extras.document === undefined && rule.exclusive && rule.assertive.length === 0 ? await store.applyForToken(operation, call) : await store.apply(operation, call, call.w, extras.document);
        } catch (error) {
          const attempted: LockData = { id, tag, timestamp: stamp, fence: 0, expiresAt: entry.exp.getTime(), ...(permits && { permits }), ...(owned && { owner: owned.owner }), ...held };
          throw failedAcquisition(error, call.boom, { lock: attempted, target: this.deployment.addressFromFilter(filter), ...landing(stamp, tolerance, call) } satisfies Acquired);
        }
        if (!reply.value) return undefined;
        const now = this.observeWrite(reply.value, reply);
        const lock = paths.read(reply.value);
        const target = this.deployment.addressOf(reply.value);
        const pruneAt = holdsMinHold(lock.tags?.[tag]) ? stamp : prunedAt(window, now, stamp);
        if (!rule.exclusive && hasExpiredEntries(lock, tag, pruneAt)) await this.pruneOwnTag(pruneTagOperation(paths, target, tag, new Date(pruneAt)), call);
        const data: LockData = { id, tag, timestamp: stamp, fence: fenceOf(lock), expiresAt: entry.exp.getTime(), ...(permits && { permits }), ...(owned && { owner: owned.owner }), ...held };
        await this.deployment.refuseSkewed(call, () => this.release(target, tag, { id }, withoutMinHold(data), call));
        return withDocument(this.assertiveOutcome(data, target, lock, stamp), reply.value, paths.field, extras.document, store.shardKey);
      },
      explain: extras.explain === false ? null : (seen, stamp, tolerance) => explainRefusedAcquisition(context, seen, stamp, tolerance),
      unexplained: () => unexplainedRefusal(lockError(conflict, call.boom, { detail: 'still held' })),
    });
  }

  /** Continue an assertive registration ({@link continueRegistration}): resolves whether the tags it asserts over are gone. */
  resume(target: Document, lock: LockData, call: ResolvedCallOptions, document?: Document | true): Promise<Acquired | AssertivePending> {
    return continueRegistration(this, this.settings.reportsReacquired, target, lock, call, document);
  }

  /**
   * Release, commit (with `write.update`) or, without a proof, monglock v2's forced release: see
   * {@link releaseLock}.
   */
  release(target: Document, tag: string, proof: Proof | undefined, claimed: ClaimedLock | undefined, call: ResolvedCallOptions, write: ReleaseWrite = {}): Promise<void> {
    // A plain release of a lock its keeper gave up, or whose lease is about to end, is a cleanup: after the extensions of live leases, a few at a time, never held back with the attempts (the lease it ends may be longer than this client knows).
    const ending = claimed !== undefined && write.update === undefined && write.mark === undefined && (claimed.lapsed === true || this.clock.remaining(claimed.expiresAt) < ENDING_LEASE_MS);
    return this.releaseAt(ending ? 'cleanup' : 'release', { target, tag, proof, claimed, write }, call);
  }

  /** Releases a lock no caller holds (an acquisition's whose reply was lost, or whose call was abandoned): a cleanup, after the extensions of held leases, before attempts. */
  releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void> {
    return this.releaseAt('cleanup', { target: written.target, tag: written.lock.tag, proof: { id: written.lock.id }, claimed: withoutMinHold(written.lock), write: {} }, call);
  }

  private releaseAt(priority: CommandPriority, request: LockRelease, call: ResolvedCallOptions): Promise<void> {
    const releasing = withPriority(call, priority);
    return asTheTransactionSees(call, releaseLock(this.settings, this.rule(request.tag), request, releasing, () => this.readClock({}, releasing)));
  }

  /** Hands `holder`'s lock over to a waiter of this process in one update ({@link handOver}); {@link withdrawHandOver} settles one that failed. */
  handOver(target: Document, holder: LockData, terms: GranteeTerms, call: ResolvedCallOptions): Promise<Acquired | undefined> {
    return handOver(this.settings, this.tags, this.rule(holder.tag), target, holder, terms, withPriority(call, 'release'));
  }

  withdrawHandOver(written: Acquired, terms: GranteeTerms, call: ResolvedCallOptions): Promise<boolean> {
    return withdrawHandOver(this.settings, written, terms, withPriority(call, 'release'));
  }

  /** Extend ({@link extendOperation}): resolves the lock with its new expiry, in its document (`{ _id }`). */
  async extend(target: Document, lock: LockData, proof: Proof, lease: number, given: ResolvedCallOptions, extension?: (stamp: Date, exp: Date) => Document, write?: FinalWrite): Promise<Acquired> {
    const { paths, store, reportsReacquired } = this.settings;
    const call = withPriority(given, 'extend');
    const rule = this.rule(lock.tag);
    const update = write?.update;
    const extending = this.stamped(call, {
      target,
      lease,
      write: async (stamp, tolerance) => {
        const at = new Date(stamp);
        const exp = new Date(this.settings.clock.expiry(stamp, lease));
        const operation = extendOperation({ paths, rule, tags: this.tags, target, proof, at, tolerance, exp, update, match: write?.match, arrayFilters: write?.arrayFilters, extension: extension?.(at, exp) });
        const reply = await store.apply(operation, call, update ? DATA_WRITE_CONCERN : call.w);
        if (!reply.value) return undefined;
        const appliedAt = this.observeWrite(reply.value, reply);
        // With an update, it landed: a skew shown now is reported with the update applied, never as a plain failure.
        refuseExcessSkew(this.settings.clock, call, update !== undefined);
        return { lock: { ...lock, expiresAt: exp.getTime() }, target: this.deployment.addressOf(reply.value), appliedAt };
      },
      explain: (seen, stamp, tolerance) =>
        explainLostLock({ paths, rule, reportsReacquired, boom: call.boom, withUpdate: update !== undefined, withMatch: write?.match !== undefined }, seen, lock, proof, stamp, tolerance, lease),
    });
    return asTheTransactionSees(call, extending);
  }

  /**
   * Reads the first document `target` selects (its lock) and the server's clock (`$$NOW`), on the
   * primary, into the bounds; fails when the skew between clocks is beyond the one assumed ({@link readClock}).
   */
  read(target: Document, call: ResolvedCallOptions): Promise<Inspection> {
    return readClock(this.settings.clock, this.settings.store, call, target);
  }

  /** Reads the server's clock into the bounds (see {@link read}). */
  async readClock(target: Document, call: ResolvedCallOptions): Promise<void> {
    await this.read(target, call);
  }

  /** A filter that matches `target` only while the lock is held and unexpired by the server's clock. */
  guard(target: Document, lock: LockData, extra?: Document): Document {
    return guardFilter(this.settings.paths, target, lock.tag, lock.id, extra);
  }

  /** Runs a stamped write ({@link runStamped}) once the deployment is known. */
  stamped<T>(call: ResolvedCallOptions, write: StampedWrite<T>): Promise<T> {
    const ready = this.deployment.ready(call);
    const run = (): Promise<T> => runStamped(this.settings.clock, this.settings.store, call, write);
    return ready ? ready.then(run) : run();
  }

  /** Learns the server's clock from a write's reply ({@link observeWrite}); returns it, in ms. */
  observeWrite(doc: Document, reply: Timed<unknown>): number {
    return observeWrite(this.settings, doc, reply);
  }

  /**
   * The outcome of a write that registered `data`, judged at its checked `stamp`: pending while a
   * tag it asserts over has an entry unexpired at it. The write pruned the entries expired by then
   * and raised `judged` to it, so none it counts as gone can be extended by a late command.
   */
  assertiveOutcome(data: LockData, target: Document, lock: StoredLock, stamp: number): Acquired | AssertivePending {
    const blockedBy = this.rule(data.tag).assertive.filter((other) => liveEntries(lock, other, stamp).length > 0);
    return blockedBy.length > 0 ? new AssertivePending(data, target, blockedBy) : { lock: data, target };
  }

  /** Garbage collection only ({@link pruneTagOperation}): its failure does not fail the acquisition. */
  private async pruneOwnTag(operation: LockOperation, call: ResolvedCallOptions): Promise<void> {
    try {
      await this.settings.store.applyOne(operation, call);
    } catch {
      // Left for the next write to prune.
    }
  }
}

/**
 * Inside the caller's transaction, MongoDB's own error is passed on as it is (a `DbError`'s cause),
 * whichever command of the call failed: the transaction's code expects it, and `withTransaction`
 * retries what it should (a TransientTransactionError).
 */
function asTheTransactionSees<T>(call: ResolvedCallOptions, running: Promise<T>): Promise<T> {
  return inTransaction(call) ? running.catch((error: unknown) => Promise.reject(driverErrorOf(error))) : running;
}

/** The error MongoDB answered a write inside the caller's transaction with (a `DbError`'s cause), as the transaction's code expects it. */
function driverErrorOf(error: unknown): unknown {
  const cause = (error as { cause?: unknown }).cause;
  return isLockError(error, 'DbError') && cause instanceof Error && cause.name.startsWith('Mongo') ? cause : error;
}

/**
 * A filter that may match several documents (not an `_id` equality) skips quarantined ones: when
 * its first match carries a live mark, its refusal is explained by a match without one, if any.
 */
function explainFirstOf(filter: Document, paths: LockPaths): Pick<StampedWrite<unknown>, 'explainFirst'> {
  const needed = (seen: Inspection): boolean => seen.value !== null && liveQuarantine(paths.read(seen.value), seen.serverNow?.getTime() ?? 0) !== undefined;
  return idNamedBy(filter) !== undefined ? {} : { explainFirst: { filter: allOf(filter, [notQuarantined(paths)]), needed } };
}
