import type { Document } from 'mongodb';
import type { ResolvedCallOptions } from '../common/options';
import type { Ticket } from '../protocol/lock-data';
import type { StoredLock } from '../protocol/stored-format';
import { dropTicketOperation, renewTicketOperation, takeTicketOperation } from '../protocol/tickets';
import { noDocument } from './refusals';
import { stampLag } from './stamp-refusals';
import { observeWrite, runStamped, type WriteSettings } from './stamped-write';
import { addressOf } from './address';
import type { ResolvedCallOptions as Call } from '../common/options';

/**
 * The ticket id a waiter was given when it came (lib/protocol/lock-ids.ts), and when it came: a stamp
 * from the lower bound of the server's clock (ms), undefined when that clock was not known yet.
 */
export interface Arrival {
  readonly id: string;
  readonly at: number | undefined;
}

/** A document's lock as a ticket write returned it, and the server's time of that write (ms). */
export interface QueueView {
  readonly lock: StoredLock;
  readonly now: number;
}

/**
 * Fair mode's tickets: a waiter's place in a document's queue. A ticket only ever delays
 * acquisitions, so its writes go at `releaseW` (default 1): one rolled back only loses its waiter
 * its place.
 */
export class FairTickets {
  constructor(
    private readonly settings: WriteSettings,
    /** Resolves once the deployment is known (its clocks' skew decides the stamps), if it is not yet. */
    private readonly ready: (call: Call) => Promise<void> | undefined,
  ) {}

  /**
   * Take a ticket ({@link takeTicketOperation}), at `releaseW`: resolves it, the document's address
   * and its queue. Its place is the waiter's `arrival` (when it came, not when its first attempt
   * was refused: callers that came after it and queued at once must not come first) if that was
   * at most half of the wide stamp window (1 s) before the first write's stamp, the server
   * checking it against that window, which leaves the write the other half; else, and on a retry,
   * the stamp of the write. (A quarter of the tight window, 25 ms and a round trip, was less than
   * a loaded machine or a slow refusal puts between a call and its ticket: the first caller was
   * then placed behind callers that came after it.) `sending` is told each ticket as its write
   * leaves (where it will stand if it lands).
   */
  async take(
    filter: Document,
    tag: string,
    leaseMs: number,
    call: ResolvedCallOptions,
    arrival: Arrival,
    sending: (ticket: Ticket) => void = () => undefined,
  ): Promise<{ ticket: Ticket; target: Document; seen: QueueView }> {
    await this.ready(call);
    let first = true;
    const placement = this.settings.clock.tolerance(leaseMs * 2, true);
    return runStamped(this.settings.clock, this.settings.store, call, {
      target: filter,
      lease: leaseMs * 2,
      write: async (stamp, tolerance) => {
        const placed = first && arrival.at !== undefined && stamp - arrival.at <= placement / 2;
        first = false;
        const at = placed ? Math.min(arrival.at!, stamp) : stamp;
        const ticket: Ticket = { id: arrival.id, tag, at: new Date(at), exp: new Date(this.settings.clock.expiry(stamp, leaseMs)) };
        const operation = takeTicketOperation(this.settings.paths, filter, ticket, placed ? placement : tolerance);
        sending(ticket);
        const reply = await this.settings.store.apply(operation, call, call.releaseW);
        if (!reply.value) return undefined;
        const now = observeWrite(this.settings, reply.value, reply);
        return { ticket, target: addressOf(reply.value, this.settings.store.shardKey), seen: { lock: this.settings.paths.read(reply.value), now } };
      },
      explain: (seen, stamp, tolerance) => (seen.value ? { retry: true, why: stampLag(seen, stamp, tolerance, leaseMs * 2) } : noDocument(call.boom)),
    });
  }

  /** Renew a ticket ({@link renewTicketOperation}) to `leaseMs` past a server-checked stamp; resolves the queue, or null when the ticket is gone. */
  async renew(target: Document, ticket: Ticket, leaseMs: number, call: ResolvedCallOptions): Promise<QueueView | null> {
    const { clock, paths, store } = this.settings;
    // Stamped as the renewal leaves its client's queue of lock commands, not when it joins it.
    const reply = await store.admitted(call, () => {
      const at = new Date(clock.stamp());
      const operation = renewTicketOperation(paths, target, ticket.id, at, new Date(clock.expiry(at.getTime(), leaseMs)), clock.tolerance(leaseMs * 2, true));
      return store.apply(operation, call, call.releaseW);
    });
    return reply.value ? { lock: paths.read(reply.value), now: observeWrite(this.settings, reply.value, reply) } : null;
  }

  /** Drop a ticket ({@link dropTicketOperation}): a waiter that gave up. */
  async drop(target: Document, ticket: Ticket, call: ResolvedCallOptions): Promise<void> {
    await this.settings.store.applyOne(dropTicketOperation(this.settings.paths, target, ticket.id), call, call.releaseW);
  }
}
