/**
 * The client's estimate of the MongoDB server's clock, from which lease stamps are taken.
 *
 * A stamp is never trusted on its own: every write that stores one also asks the server, in the
 * same atomic update, whether the stamp lies within `[$$NOW - tolerance, $$NOW]` by its own clock
 * (see `stampWithin`). A write whose stamp fails that check matches nothing; the caller then reads
 * the server's time (`observe`) and tries again. So a client clock that is minutes off costs two
 * extra round trips once, never a wrong expiry.
 *
 * The estimate is a lower bound: after observing server time `S` in a reply that arrived at local
 * time `t1`, the server's clock at a later local time `t` is at least `S + (t - t1)`.
 */
export class ServerClock {
  private offset = 0;
  private verified = 0;
  private observedAt: number | undefined;

  constructor(private readonly localNow: () => number) {}

  /** The current stamp: a whole ms, the estimated server time, at most the server's real time. */
  stamp(): number {
    return Math.floor(this.localNow() + this.offset);
  }

  /** Local time, for measuring how long a reply took. */
  local(): number {
    return this.localNow();
  }

  /** Learns the server's time `serverNow` from a reply that arrived at local time `arrivedAt`. */
  observe(serverNow: Date, arrivedAt: number): void {
    this.offset = serverNow.getTime() - arrivedAt;
    this.observedAt = arrivedAt;
  }

  /**
   * True when a server time was observed within `maxAgeMs`, so that `stamp()` is a fresh lower
   * bound of the server's clock.
   */
  synchronizedWithin(maxAgeMs: number): boolean {
    return this.observedAt !== undefined && this.localNow() - this.observedAt <= maxAgeMs;
  }

  /** Records a stamp the server accepted (so it is in the server's past from now on). */
  accepted(stamp: number): void {
    if (stamp > this.verified) this.verified = stamp;
  }

  /**
   * The newest stamp the server has accepted: safe to use as a pruning bound without another
   * check, since the server's clock has passed it. 0 when none yet.
   */
  lastAccepted(): number {
    return this.verified;
  }
}

/**
 * How far behind the server's clock a stamp may be for a lease of `leaseMs`: half the lease
 * (so an acquired lock always has at least half its lease left), at most 5 s.
 */
export function stampTolerance(leaseMs: number): number {
  return Math.max(1, Math.min(Math.floor(leaseMs / 2), 5_000));
}
