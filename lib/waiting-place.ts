import type { Document } from 'mongodb';
import { isLockError } from './errors';
import { refusedDocumentOf, type LockEngine, type Ticket } from './lock-engine';
import type { LocalWaiters, Waiter } from './local-waiters';
import type { ResolvedCallOptions } from './options';
import { delay, MAX_RETRY_DELAY } from './waiting';

/** How long a fair waiter's ticket lives unless renewed, in ms: a crashed waiter leaves the queue by then. */
export const TICKET_LEASE = 2_000;
/** How often a fair waiter renews its ticket, in ms. */
const TICKET_RENEWAL = 600;

/**
 * Where a waiting acquisition waits: among this process's waiters for the refusing document (a
 * local release wakes the first of them at once), and in fair mode in that document's queue, with
 * a ticket it renews while it waits and takes out when it gives up. The acquisition that wins
 * takes its ticket out in the same update.
 */
export class WaitingPlace {
  private waiter: Waiter | undefined;
  private documentId: unknown;
  private ticket: Ticket | undefined;
  private renewal: NodeJS.Timeout | undefined;
  private readonly since: number;
  /** The wait is over (an attempt in flight may still come back here). */
  private left = false;
  /** Queued behind local waiters before its first attempt. */
  private behindOthers = false;

  constructor(
    private readonly engine: LockEngine,
    private readonly waiters: LocalWaiters,
    private readonly call: ResolvedCallOptions,
    private readonly tag: string,
    private readonly fair: boolean,
  ) {
    this.since = performance.now();
  }

  /**
   * Before the first attempt of a waiting call: the document is known when the filter names its
   * `_id`. When waiters of this process already wait there, this call waits behind them rather
   * than racing them (in fair mode with a ticket taken at once); callers in other processes are
   * not affected (only fair mode orders them).
   */
  async start(userFilter: Document): Promise<void> {
    const id = plainId(userFilter);
    if (id === undefined) return;
    const behind = this.waiters.queued(id) > 0;
    this.join(id);
    if (!behind) return;
    // Waiters of this process came first: wait behind them (a release here wakes the first of
    // them); in fair mode, with a ticket in the document's queue.
    if (this.fair) await this.refused(undefined, userFilter);
    this.behindOthers = true;
  }

  /**
   * True when the next refusal needs no read to be explained: the document is held, or waited
   * for, by others in this process, so a refusal is a conflict (every 8th is still explained).
   */
  get refusalIsConflict(): boolean {
    return this.documentId !== undefined && (this.waiters.heldHere(this.documentId) || this.waiters.queued(this.documentId) > 1);
  }

  /**
   * Once, before the first attempt of a waiter that queued behind others at once: sleeps until
   * its turn (a local release wakes it), as an attempt could only be refused.
   */
  async awaitTurn(signal: AbortSignal | undefined): Promise<void> {
    if (!this.behindOthers) return;
    this.behindOthers = false;
    await this.sleep(MAX_RETRY_DELAY, signal);
  }

  /** The fair-mode condition of the next attempt (undefined when not fair). */
  get fairness(): { readonly ticket?: Ticket } | undefined {
    return this.fair ? { ticket: this.ticket } : undefined;
  }

  /** The filter of the next attempt: the document holding our ticket, once we have one. */
  filter(userFilter: Document): Document {
    return this.ticket && this.documentId !== undefined ? { _id: this.documentId } : userFilter;
  }

  /**
   * An attempt was refused and the call goes on waiting: joins the refusing document's local
   * waiters, and in fair mode takes a ticket in its queue (once).
   */
  async refused(error: unknown, userFilter: Document): Promise<void> {
    if (this.left) return;
    const id = refusedDocumentOf(error);
    if (id !== undefined) this.join(id);
    if (!this.fair || this.ticket || (error !== undefined && !isLockError(error, this.engine.conflict))) return;
    const filter = this.documentId === undefined ? userFilter : { _id: this.documentId };
    const taken = await this.engine.takeTicket(filter, this.tag, TICKET_LEASE, this.call);
    if (this.left) {
      // The call gave up while the ticket was being taken: take it out again.
      await this.engine.dropTicket(taken.target, taken.ticket, this.call).catch(() => undefined);
      return;
    }
    this.ticket = taken.ticket;
    this.join(taken.target._id);
    // A release may have gone to another waiter while this ticket, older in the server's queue,
    // was on its way: unless a holder here will wake it, try again at once.
    if (!this.waiters.heldHere(this.documentId)) this.waiter?.wake();
    this.renewal = setInterval(() => {
      const ticket = this.ticket;
      if (ticket) void this.engine.renewTicket({ _id: this.documentId }, ticket, TICKET_LEASE, this.call).catch(() => undefined);
    }, TICKET_RENEWAL);
  }

  /** Joins this process's waiters of document `id` (once). */
  private join(id: unknown): void {
    if (this.documentId !== undefined) return;
    this.documentId = id;
    // Fair: the oldest ticket first, waiters still without one last; else the longest waiting first.
    this.waiter = this.waiters.join(id, () => (this.ticket ? [this.ticket.at.getTime(), this.ticket.id] : [this.fair ? Infinity : this.since, '']));
  }

  /** Sleeps between attempts: `ms`, or until a local release wakes this waiter. */
  readonly sleep = (ms: number, signal: AbortSignal | undefined, left = ms): Promise<void> => (this.waiter ? this.waiter.sleep(ms, signal, left) : delay(ms, signal));

  /** The wait is over: leaves the local waiters and, unless `won` (the winning update took it out), the queue. */
  async leave(won: boolean): Promise<void> {
    this.left = true;
    clearInterval(this.renewal);
    this.waiter?.leave();
    const ticket = this.ticket;
    this.ticket = undefined;
    if (ticket && !won) await this.engine.dropTicket({ _id: this.documentId }, ticket, this.call).catch(() => undefined);
  }
}

/** The `_id` a filter names by equality (a string, number or ObjectId), if any. */
function plainId(filter: Document): unknown {
  const id: unknown = filter._id;
  if (id === undefined || id === null) return undefined;
  if (typeof id === 'object' && Object.getPrototypeOf(id) === Object.prototype) return undefined; // an operator object
  return id;
}
