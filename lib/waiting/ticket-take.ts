import type { QueueTicket } from './queue-ticket';
import type { Waiter } from './waiter';

/** A ticket as its take returned it. */
export type Taken = Awaited<ReturnType<QueueTicket['take']>>;

/**
 * A fair waiter's ticket take, once, shared by the refusals that come while it is on its way. A
 * release here may hand the waiter the lock meanwhile (at that ticket's place,
 * lib/waiting/waiting-place.ts): the waiter then goes on at once with it, and the take goes on: if
 * that hand-over gives it nothing (a waiter of another process came first), the ticket, once
 * landed, is still its place (a take sent again later would be placed behind waiters of other
 * processes that came after it); if the wait is over by then, the ticket is taken out.
 */
export class TicketTake {
  #taking: Promise<void> | undefined;
  /** A hand-over came while the take was on its way: it did not take the ticket out if the ticket landed first (a win must drop it). */
  adrift = false;

  constructor(private readonly queue: QueueTicket) {}

  /**
   * Takes the ticket (`take`), unless a take is on its way already; `landed` keeps it, unless
   * `over()` by then (it is dropped). Resolves when it landed, or when `waiter` is handed the lock.
   */
  async until(take: () => Promise<Taken>, landed: (taken: Taken) => void, over: () => boolean, waiter: Waiter | undefined): Promise<void> {
    const taking = (this.#taking ??= this.#settle(take(), landed, over));
    const handOver = waiter?.handedOver();
    try {
      await Promise.race([taking, handOver?.handed ?? taking]);
    } finally {
      handOver?.stop();
      if (waiter?.granted && this.#taking === taking) this.adrift = true;
    }
  }

  async #settle(taking: Promise<Taken>, landed: (taken: Taken) => void, over: () => boolean): Promise<void> {
    try {
      const taken = await taking;
      // The wait is over (given up, or won by a hand-over) while the ticket was being taken: take it out again.
      if (over()) this.queue.drop(taken.target, taken.ticket);
      else landed(taken);
    } finally {
      this.#taking = undefined;
    }
  }
}
