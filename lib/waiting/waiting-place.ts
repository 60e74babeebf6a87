import { idNamedBy, namesOneDocument } from '../common/validation';
import { publish } from '../common/diagnostics';
import type { Document } from 'mongodb';
import { isLockError, lockError } from '../common/errors';
import { refusedDocumentOf, type Acquired } from '../engine/acquired';
import { blockingLeaseEnd, isUnexplained } from '../engine/refusals';
import type { GranteeTerms } from '../engine/hand-over';
import type { LockEngine } from '../engine/lock-engine';
import { waitsFor, type Ticket } from '../protocol/lock-data';
import { QueueTicket } from './queue-ticket';
import { TicketTake, type Taken } from './ticket-take';
import type { LocalWaiters } from './local-waiters';
import type { Waiter } from './waiter';
import type { ResolvedCallOptions } from '../common/options';
import { delay, MAX_RETRY_DELAY } from './wait-options';

export { TICKET_LEASE } from './queue-ticket';

/**
 * Where a waiting acquisition waits: among this process's waiters for the refusing document (a
 * local release wakes the first of them at once), and in fair mode in that document's queue, with
 * a ticket it renews while it waits and takes out when it gives up. The acquisition that wins
 * takes its ticket out in the same update.
 */
export class WaitingPlace {
  private waiter: Waiter | undefined;
  private documentId: unknown;
  /** Its fair ticket, once taken. */
  private readonly queue: QueueTicket;
  private readonly since: number;
  /** The wait is over (an attempt in flight may still come back here). */
  private left = false;
  private announced = false;
  /** Queued behind local waiters before its first attempt. */
  private behindOthers = false;
  /** Its filter is just `{ _id }`, and it has no owner: a look may stand for an attempt. */
  private plainFilter = false;
  /** What it asks for when a lock is handed over to it, if it accepts hand-overs. */
  private terms: GranteeTerms | undefined;
  /** Its ticket's take. */
  private readonly taking: TicketTake;

  /** The tags whose locks this acquisition waits for: those it is cooperative with or asserts over, and its own when it has a limit. */
  private readonly blockedBy: ReadonlySet<string>;
  /** A tag with a limit (a semaphore): several of its waiters may fit at once. */
  private readonly limited: boolean;

  constructor(
    private readonly engine: LockEngine,
    private readonly waiters: LocalWaiters,
    private readonly call: ResolvedCallOptions,
    private readonly tag: string,
    private readonly fair: boolean,
  ) {
    this.since = performance.now();
    this.queue = new QueueTicket(engine, call, tag, () => this.waiters.localTickets(this.documentId), fair);
    this.taking = new TicketTake(this.queue);
    this.blockedBy = waitsFor(engine.rule(tag));
    this.limited = engine.rule(tag).limit !== undefined;
  }

  /**
   * Before the first attempt of a waiting call: the document is known when the filter names its
   * `_id`. When waiters of this process already wait there, this call waits behind them rather
   * than racing them (in fair mode with a ticket taken at once); callers in other processes are
   * not affected (only fair mode orders them).
   */
  start(userFilter: Document, wait: number): Promise<void> | undefined {
    const id = idNamedBy(userFilter);
    if (id === undefined) return;
    // Only waiters whose lock would block this one: a tag concurrent with theirs does not queue,
    // nor does a tag with a limit (its waiters may all fit: each tries, a release wakes as many as it freed).
    const behind = !this.limited && this.waiters.queued(id, this.blockedBy) > 0;
    this.join(id);
    if (!behind) return; // no stream yet: an attempt that wins at once never needs one
    this.waiters.listen(id);
    // Waiters of this process came first: wait behind them (a release here wakes the first of
    // them); in fair mode, with a ticket in the document's queue.
    this.behindOthers = true;
    if (!this.fair) return;
    // The ticket write is bounded by the wait: past it, the call gives up (and drops the ticket).
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(lockError(this.engine.conflict, this.call.boom, { detail: `still held after waiting ${wait} ms (queued behind earlier waiters)` })), wait);
    });
    return Promise.race([this.refused(undefined, userFilter), deadline]).finally(() => clearTimeout(timer));
  }

  /**
   * True when a refusal needs no read to be explained: a lock that blocks this acquisition is
   * held in this process, so the document exists and a refusal is a conflict.
   */
  get refusalIsConflict(): boolean {
    return this.documentId !== undefined && this.waiters.heldHere(this.documentId, this.blockedBy);
  }

  /**
   * What this waiter waits for before its next attempt, if anything. First its turn, once, if it
   * queued behind waiters here at once: it sleeps until a release here wakes it (an attempt could
   * only be refused), at most what is left of its wait, unless nothing that blocks it is held here
   * and it is first in line (no release here would wake it). Then, unless a release here handed
   * it the lock meanwhile (it is handed one only while it sleeps, so none comes during a look), a
   * look at the queue ({@link QueueTicket.look}) in place of an attempt while fair tickets that
   * came first were live when its queue was last seen. Undefined when there is nothing to wait
   * for: nothing is awaited then, so callers that come together send in the order they came.
   */
  beforeAttempt(signal: AbortSignal | undefined, waitEnds: number, mayLook: boolean): Promise<void> | undefined {
    const look = (): Promise<void> | undefined => (mayLook && !this.waiter?.granted && this.onlyLooks ? this.queue.look(waitEnds, () => this.onlyLooks) : undefined);
    const turn = this.awaitTurn(signal, waitEnds - performance.now());
    return turn ? turn.then(look) : look();
  }

  private awaitTurn(signal: AbortSignal | undefined, left: number): Promise<void> | undefined {
    if (!this.behindOthers) return;
    this.behindOthers = false;
    if (this.waiter && !this.refusalIsConflict && (this.queue.position.first || this.waiters.firstInLine(this.documentId, this.waiter))) return;
    return this.sleep(Math.max(0, Math.min(MAX_RETRY_DELAY, left)), signal, Math.max(0, left));
  }

  /**
   * True when, in fair mode, tickets that came first were still live when its queue was last
   * seen, and its filter is just `{ _id }` (a look checks nothing else: a filter that says more
   * is attempted, so that a document that stops matching is noticed): an attempt could only be
   * refused. (An owner's call never looks: its nested hold skips the queue.)
   */
  private get onlyLooks(): boolean {
    return this.queue.ticket !== undefined && this.plainFilter && this.queue.position.behind;
  }

  /** Lets looks stand for attempts while others are ahead: only for a filter that is just `{ _id }` and a call without an owner. */
  allowLooks(userFilter: Document, owned: boolean): void {
    this.plainFilter = !owned && namesOneDocument(userFilter, this.engine.store.shardKey);
  }

  /**
   * Lets a release in this process hand the lock over to this waiter in one update (see
   * lib/engine/hand-over.ts), asking for `terms`: only a plain acquisition (no owner, permits or
   * assertive registration, decided by the caller) of an exclusive tag on a filter that is just
   * `{ _id }` (a hand-over checks no other condition of the caller's filter).
   */
  acceptHandOver(userFilter: Document, terms: GranteeTerms): void {
    const rule = this.engine.rule(this.tag);
    if (!rule.exclusive || rule.assertive.length > 0 || !namesOneDocument(userFilter, this.engine.store.shardKey)) return;
    this.terms = { ...terms, ready: () => this.queue.position.nextHere, placing: () => this.queue.sending !== undefined };
    if (this.waiter) this.waiter.terms = this.terms;
  }

  /** The hand-over on its way to this waiter, once: its next attempt awaits it. */
  takeGrant(): Promise<Acquired | undefined> | undefined {
    return this.waiter?.takeGrant();
  }

  /** The fair-mode condition of the next attempt, or of a hand-over (undefined when not fair): its ticket, or the one whose take is on its way. */
  get fairness(): { readonly ticket?: Ticket } | undefined {
    return this.fair ? { ticket: this.queue.ticket ?? this.queue.sending } : undefined;
  }

  /** An attempt was refused and the call goes on waiting: joins the refusing document's local waiters, and in fair mode takes a ticket in its queue (once). */
  async refused(error: unknown, userFilter: Document): Promise<void> {
    if (this.left) return;
    const id = refusedDocumentOf(error);
    if (id !== undefined) this.join(id);
    if (this.documentId !== undefined) this.waiters.listen(this.documentId);
    // Known to be a conflict when a read explained it (it tells when the blocking leases end, if they do) or a lock held here refused it (whose lease end is known here).
    if (error !== undefined && !isUnexplained(error)) this.waiter?.refused(true, blockingLeaseEnd(error));
    else if (error !== undefined) this.waiter?.refused(this.refusalIsConflict, this.refusalIsConflict ? this.waiters.heldUntil(this.documentId, this.blockedBy) : undefined);
    this.announce(userFilter);
    // A queue belongs to one document: a filter that does not name its `_id` could match another
    // one next time, so it waits without a ticket (as without fair mode).
    if (!this.fair || this.queue.ticket || idNamedBy(userFilter) === undefined || (error !== undefined && !isLockError(error, this.engine.conflict))) return;
    await this.taking.until(() => this.queue.take(userFilter), (taken) => this.landed(taken, error !== undefined), () => this.left, this.waiter);
  }

  /** Its ticket landed: keeps it; after a refusal, first in the queue and with no holder here to wake it, tries again at once (a release may have gone to another waiter meanwhile). */
  private landed(taken: Taken, afterRefusal: boolean): void {
    this.join(taken.target._id);
    this.queue.keep(taken.target, taken.ticket, taken.seen);
    if (afterRefusal && this.queue.position.first && !this.waiters.heldHere(this.documentId, this.blockedBy)) this.waiter?.wake();
  }

  /** Publishes on `monglock:wait`, once, how this call will be woken ({@link announceWait}). */
  private announce(userFilter: Document): void {
    if (!this.announced) announceWait(this.engine.namespace, this.tag, this.fair && idNamedBy(userFilter) !== undefined, this.waiters, this.documentId, this.blockedBy);
    this.announced = true;
  }

  /** Joins this process's waiters of document `id` (once). */
  private join(id: unknown): void {
    if (this.documentId !== undefined) return;
    this.documentId = id;
    const rank = (): readonly [number, string] => rankOf(this.queue, this.fair, this.since);
    // A change elsewhere can be its turn only when, as last seen, at most one ticket came first (the one a release may have served);
    // it relies on the stream only when its filter names this document alone (one that says more may come to match another) and no fair ticket paces it.
    const reliesOnStream = (): boolean => this.plainFilter && this.queue.ticket === undefined;
    this.waiter = this.waiters.join(id, this.tag, this.blockedBy, rank, () => !this.queue.ticket || this.queue.position.waitersAhead <= 1, reliesOnStream, false);
    this.waiter.terms = this.terms;
  }

  /** True once after a local release woke this waiter: its next refusal is explained (the situation changed). */
  takeWakeUp(): boolean {
    return this.waiter?.takeWakeUp() ?? false;
  }

  /**
   * Sleeps between attempts: `ms` (a fair waiter with a ticket: as its place in the queue
   * paces it), or until a local release wakes this waiter.
   */
  readonly sleep = (ms: number, signal: AbortSignal | undefined, left = ms): Promise<void> => {
    const paced = this.queue.ticket ? Math.min(left, this.queue.position.pace(ms)) : ms;
    return this.waiter ? this.waiter.sleep(paced, signal, left) : delay(paced, signal);
  };

  /**
   * The wait is over: leaves the local waiters and, unless `won` (the winning update took it
   * out), the queue, in the background (a caller that gave up does not wait for it).
   */
  leave(won: boolean): void {
    this.left = true;
    this.waiter?.leave(won);
    // A win by a hand-over sent before its ticket landed did not take that ticket out.
    this.queue.leave(won && !this.taking.adrift);
  }
}

/**
 * A waiter's rank among this process's waiters of its document (lowest first). Fair: the oldest
 * ticket first, one whose take is on its way where it will stand (a release here must not hand
 * the lock past it), waiters still without one last; else the longest waiting first.
 */
function rankOf(queue: QueueTicket, fair: boolean, since: number): readonly [number, string] {
  const ticket = queue.ticket ?? queue.sending;
  return ticket ? [ticket.at.getTime(), ticket.id] : [fair ? Infinity : since, ''];
}

/** Publishes on `monglock:wait` how a call that waits on document `id` (if known) will be woken: by a holder here, the change stream, or its poll. */
function announceWait(namespace: string, tag: string, fair: boolean, waiters: LocalWaiters, id: unknown, blockedBy: ReadonlySet<string>): void {
  publish.wait(() => {
    const local = id !== undefined && waiters.heldHere(id, blockedBy);
    return { namespace, tag, wakeUp: local ? 'local' : waiters.streaming ? 'stream' : 'polling', fair };
  });
}
