import type { Document } from 'mongodb';
import { isLockError } from './errors';
import { refusedDocumentOf, type LockEngine, type Ticket } from './lock-engine';
import type { LocalWaiters, Waiter } from './local-waiters';
import type { ResolvedCallOptions } from './options';
import { delay } from './waiting';

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

  constructor(
    private readonly engine: LockEngine,
    private readonly waiters: LocalWaiters,
    private readonly call: ResolvedCallOptions,
    private readonly tag: string,
    private readonly fair: boolean,
  ) {
    this.since = performance.now();
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
    if (id !== undefined && this.documentId === undefined) {
      this.documentId = id;
      this.waiter = this.waiters.join(id, () => (this.ticket ? [this.ticket.at.getTime(), this.ticket.id] : [this.since, '']));
    }
    if (!this.fair || this.ticket || !isLockError(error, this.engine.conflict)) return;
    const filter = this.documentId === undefined ? userFilter : { _id: this.documentId };
    const taken = await this.engine.takeTicket(filter, this.tag, TICKET_LEASE, this.call);
    if (this.left) {
      // The call gave up while the ticket was being taken: take it out again.
      await this.engine.dropTicket(taken.target, taken.ticket, this.call).catch(() => undefined);
      return;
    }
    this.ticket = taken.ticket;
    if (this.documentId === undefined) {
      this.documentId = taken.target._id;
      this.waiter = this.waiters.join(this.documentId, () => [taken.ticket.at.getTime(), taken.ticket.id]);
    }
    this.renewal = setInterval(() => {
      const ticket = this.ticket;
      if (ticket) void this.engine.renewTicket({ _id: this.documentId }, ticket, TICKET_LEASE, this.call).catch(() => undefined);
    }, TICKET_RENEWAL);
  }

  /** Sleeps between attempts: `ms`, or until a local release wakes this waiter. */
  readonly sleep = (ms: number, signal: AbortSignal | undefined): Promise<void> => (this.waiter ? this.waiter.sleep(ms, signal) : delay(ms, signal));

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
