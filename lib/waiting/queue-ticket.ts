import type { Document } from 'mongodb';
import { lockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { QueueView } from '../engine/fair-tickets';
import type { LockEngine } from '../engine/lock-engine';
import { unexplainedRefusal } from '../engine/refusals';
import { queuedBehind, type Ticket } from '../protocol/lock-data';
import { newTicketId, ticketNumber } from '../protocol/lock-ids';
import { earlierTickets } from '../protocol/tickets';
import { QueuePosition } from './queue-position';

/** How long a fair waiter's ticket lives unless renewed, in ms: a crashed waiter leaves the queue by then. */
export const TICKET_LEASE = 2_000;
/** How often a fair waiter renews its ticket, in ms. */
const TICKET_RENEWAL = 600;

/**
 * A fair waiter's ticket in its document's queue: renewed while it waits (in the background, and
 * by its looks), and where it stands, as its writes last showed it ({@link QueuePosition}).
 */
export class QueueTicket {
  /** The ticket, once taken (until the wait is over). */
  ticket: Ticket | undefined;
  /** The ticket whose take is on its way: where it will stand in the queue if it lands. */
  sending: Ticket | undefined;
  /** The address of the document whose queue holds {@link ticket} (its `_id`, and its shard key values). */
  private target: Document | undefined;
  /** Where it stands in the queue, as last seen. */
  readonly position = new QueuePosition();
  private renewal: NodeJS.Timeout | undefined;
  /** When it was last written (sent; local ms). */
  private renewedAt = 0;

  /** Fair: its place among this process's tickets, and when its waiter came if the server's clock was known then: a ticket taken later keeps that place. */
  private readonly arrival: { readonly number: number; readonly at: number | undefined } | undefined;

  constructor(
    private readonly engine: LockEngine,
    private readonly call: ResolvedCallOptions,
    private readonly tag: string,
    /** The ids of this process's tickets for the document (served here first, in order). */
    private readonly here: () => ReadonlySet<string>,
    fair: boolean,
  ) {
    // Before any reply, the lower bound is the local clock, a guess the server has not checked: not a place.
    if (fair) this.arrival = { number: ticketNumber(), at: engine.clock.synchronized ? engine.clock.stamp() : undefined };
  }

  /**
   * Takes a ticket in the queue of the first document `filter` matches, in the place of when its
   * waiter came: resolves it, that document's address and its queue (then {@link keep} it, or
   * {@link drop} it).
   */
  take(filter: Document): Promise<{ ticket: Ticket; target: Document; seen: QueueView }> {
    this.renewedAt = performance.now();
    const arrival = this.arrival ?? { number: ticketNumber(), at: undefined };
    const taking = this.engine.tickets.take(filter, this.tag, TICKET_LEASE, this.call, { id: newTicketId(arrival.number), at: arrival.at }, (ticket) => (this.sending = ticket));
    return taking.finally(() => (this.sending = undefined));
  }

  /** Takes `ticket` out of the queue of the document `target` addresses, in the background (a caller that gave up does not wait for it). */
  drop(target: Document, ticket: Ticket): void {
    void this.engine.tickets.drop(target, ticket, this.call).catch(() => undefined);
  }

  /** Keeps `ticket` of the document `target` addresses, seen as `seen`, and renews it while the wait lasts. */
  keep(target: Document, ticket: Ticket, seen: QueueView): void {
    this.ticket = ticket;
    this.target = target;
    this.see(seen);
    clearInterval(this.renewal);
    this.renewal = setInterval(() => {
      const current = this.ticket;
      // Looks renew it too: a ticket written (sent) less than half an interval ago is not renewed here.
      if (!current || performance.now() - this.renewedAt < TICKET_RENEWAL / 2) return;
      this.renewedAt = performance.now();
      this.engine.tickets.renew(target, current, TICKET_LEASE, this.call).then(
        (view) => current === this.ticket && this.see(view),
        () => undefined,
      );
    }, TICKET_RENEWAL);
  }

  /**
   * A look at its document's queue instead of an attempt that could only be refused: renews the
   * ticket, which reads the queue in the same command, bounded by `deadline` (a look that comes
   * back late, or fails, says nothing: it changes nothing on the server). Rejects with a conflict
   * while tickets that came first are still live, as far as it saw.
   */
  async look(deadline: number, stillBehind: () => boolean): Promise<void> {
    const { ticket, target } = this;
    if (!ticket || !target) return;
    this.renewedAt = performance.now();
    const renewal = this.engine.tickets.renew(target, ticket, TICKET_LEASE, this.call);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, deadline - performance.now()))));
    try {
      const seen = await Promise.race([renewal, late]);
      if (seen !== 'late') this.see(seen);
    } catch {
      // The attempt that follows tries (and reports a DbError if MongoDB is unreachable).
      this.position.forget();
      return;
    } finally {
      clearTimeout(timer);
    }
    if (!stillBehind()) return;
    const detail = `${this.position.waitersAhead} waiter(s) came first (fair mode)`;
    throw unexplainedRefusal(lockError(this.engine.conflict, this.call.boom, { detail }));
  }

  /** The wait is over: stops renewing, and unless `won` (the winning update took it out) drops the ticket. */
  leave(won: boolean): void {
    clearInterval(this.renewal);
    const { ticket, target } = this;
    this.ticket = undefined;
    if (ticket && target && !won) this.drop(target, ticket);
  }

  /**
   * What a ticket write returned: the queue (where this ticket stands), or null: the ticket is not
   * there as written (gone, or its stamp refused): its place is unknown, so the waiter attempts
   * (with the ticket, an attempt keeps its place while it is live) until a renewal sees it again.
   */
  private see(view: QueueView | null): void {
    if (!view || !this.ticket) {
      this.position.forget();
      return;
    }
    const ahead = earlierTickets(view.lock, queuedBehind(this.engine.rule(this.tag)), view.now, this.ticket);
    const here = this.here();
    this.position.saw(ahead.length, performance.now(), ahead.filter((ticket) => !here.has(ticket.id)).length);
  }
}
