import { MAX_RETRY_DELAY, MIN_RETRY_DELAY, retryDelay } from './wait-options';

/**
 * Where a fair waiter stands in its document's queue, as its ticket's writes last showed it (they
 * return the document): how many live tickets that block it came first, and how fast the queue
 * moves. It paces the waiter, so that the one whose turn comes is the one polling: a waiter with
 * others ahead only looks (renews its ticket, which reads the queue in the same command) about
 * halfway to its expected turn; the first in line tries to acquire, from the shortest delay up.
 */
export class QueuePosition {
  /** Of those, the tickets of other processes (those of this process are served here first, in order). */
  private elsewhere = 0;
  /** Live tickets that block this waiter and came first, as last seen; undefined: not seen yet. */
  private ahead: number | undefined;
  /** When the queue was last seen to move (local ms). */
  private movedAt = 0;
  /** How long one waiter ahead takes to leave the queue, in ms (smoothed); undefined: not known yet. */
  private turnMs: number | undefined;
  /** Attempts since this waiter became first in line. */
  private firstTries = 0;

  /** The queue as a ticket write saw it at local time `at`: `ahead` live tickets that block this waiter came first. */
  saw(ahead: number, at: number, elsewhere = ahead): void {
    this.elsewhere = elsewhere;
    if (this.ahead === undefined || ahead < this.ahead) {
      if (this.ahead !== undefined) this.smooth((at - this.movedAt) / (this.ahead - ahead));
      this.movedAt = at;
      if (ahead === 0) this.firstTries = 0;
    } else {
      // Nobody left since it last moved: the turn in progress has lasted at least this long.
      this.turnMs = Math.max(this.turnMs ?? 0, at - this.movedAt);
    }
    this.ahead = ahead;
  }

  /** The ticket is gone (expired, or the document): nothing is known until a new one is taken. */
  forget(): void {
    this.ahead = undefined;
    this.elsewhere = 0;
    this.turnMs = undefined;
  }

  /** True when others are ahead, as last seen: an acquisition could only be refused, so the waiter looks instead. */
  get behind(): boolean {
    return this.ahead !== undefined && this.ahead > 0;
  }

  /** True when, as last seen, no ticket of another process that blocks this waiter came first: a release here may hand it the lock. */
  get nextHere(): boolean {
    return this.ahead === undefined || this.elsewhere === 0;
  }

  /** True when, as last seen, no ticket that blocks this waiter came first. */
  get first(): boolean {
    return this.ahead === 0;
  }

  /** How many came first, as last seen (0 when not seen). */
  get waitersAhead(): number {
    return this.ahead ?? 0;
  }

  /** The delay before the next look or attempt, in ms, instead of the default backoff `ms`. */
  pace(ms: number): number {
    if (this.ahead === undefined) return ms;
    if (this.ahead === 0) return retryDelay(++this.firstTries);
    if (this.turnMs === undefined) return ms;
    return Math.min(MAX_RETRY_DELAY, Math.max(MIN_RETRY_DELAY, (this.ahead * this.turnMs) / 2));
  }

  private smooth(sample: number): void {
    this.turnMs = this.turnMs === undefined ? sample : (this.turnMs + sample) / 2;
  }
}
