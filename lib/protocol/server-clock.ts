/**
 * What this client knows of the MongoDB server's clock: a lower and an upper bound, kept from
 * every reply that carries the server's time, measured against the local monotonic clock.
 *
 * A reply that left at local time `sentAt`, arrived at `arrivedAt` and carries the server's time
 * `S` (a whole ms, so the server's clock read somewhere in `[S, S + 1)`) proves that, at a later
 * local time `t`, the server's clock reads
 *
 * ```
 * at least  S     + (t - arrivedAt)   (it was read before the reply arrived)
 * at most   S + 1 + (t - sentAt)      (it was read after the request left)
 * ```
 *
 * widened by {@link MAX_DRIFT} per elapsed ms, since two clocks never run at exactly one rate.
 * The tightest bound from any reply is kept. Every decision states which bound it uses:
 *
 * - **Stamps the server checks** (`at` of a new lock, judged against `$$NOW` in the same update)
 *   come from the lower bound: a stamp at or below the server's clock never makes a live entry
 *   look expired.
 * - **A holder deciding alone that it still holds a lock** (the lease keeper, `handle.remaining()`)
 *   uses the upper bound: while `expiresAt` is above it, the server's clock has not reached the
 *   lease's end either.
 *
 * A reply that contradicts the bounds (the server's clock was stepped, or another primary with
 * another clock took over) replaces them. A local clock that steps backwards (it should be
 * monotonic, but an injected one may not be) drops them: until the next reply, the upper bound is
 * unknown (`Infinity`), so every holder's view says its lease may have ended.
 */
export class ServerClock {
  /** The lower bound's anchor: the server read `server` (ms) no later than local time `local`. */
  private low: Anchor | undefined;
  /** The upper bound's anchor: the server read `server` (ms) no earlier than local time `local`. */
  private high: Anchor | undefined;
  /** Smoothed round-trip time of replies that carried the server's time, in ms. */
  private smoothedRtt: number | undefined;
  /** The latest local time read, to notice a local clock that steps backwards. */
  private lastLocal = -Infinity;

  constructor(private readonly localNow: () => number) {}

  /** Local time (the monotonic clock), for timing requests. */
  local(): number {
    const now = this.localNow();
    if (now < this.lastLocal) this.forget();
    this.lastLocal = now;
    return now;
  }

  /** True once a reply carrying the server's time was observed. */
  get synchronized(): boolean {
    return this.low !== undefined;
  }

  /** Learns from a reply carrying the server's time `serverNow`, sent at `sentAt` and arrived at `arrivedAt` (local ms). */
  observe(serverNow: Date, sentAt: number, arrivedAt: number): void {
    const server = serverNow.getTime();
    const now = this.local();
    // A reply timed across a backward step of the local clock proves nothing.
    if (!Number.isFinite(server) || arrivedAt < sentAt || now < arrivedAt) return;
    const rtt = arrivedAt - sentAt;
    this.smoothedRtt = this.smoothedRtt === undefined ? rtt : this.smoothedRtt + (rtt - this.smoothedRtt) / 8;
    const low = { server, local: arrivedAt };
    const high = { server: server + 1, local: sentAt };
    if (!this.low || !this.high) {
      this.low = low;
      this.high = high;
      return;
    }
    const bestLow = lowerAt(low, now) > lowerAt(this.low, now) ? low : this.low;
    const bestHigh = upperAt(high, now) < upperAt(this.high, now) ? high : this.high;
    if (lowerAt(bestLow, now) > upperAt(bestHigh, now)) {
      // The server's clock moved against what it said before: trust only the newest reply.
      this.low = low;
      this.high = high;
      return;
    }
    this.low = bestLow;
    this.high = bestHigh;
  }

  /**
   * A lower bound of the server's clock now, in whole ms: what stamps are taken from. Before any
   * reply it is the local clock, a guess that the server's check accepts or refuses.
   */
  lower(): number {
    const now = this.local();
    return Math.floor(this.low ? lowerAt(this.low, now) : now);
  }

  /** An upper bound of the server's clock now, in whole ms (`Infinity` before any reply, or after a backward local step). */
  upper(): number {
    const now = this.local();
    return this.high ? Math.ceil(upperAt(this.high, now)) : Infinity;
  }

  /**
   * How far behind the server's clock (`$$NOW`) a stamp may be when the update that writes it
   * runs. Tight by default: what this client's round trips explain (100 ms + 4 smoothed round
   * trips, 25 ms assumed before the first reply), so that a lock starts with nearly all of its
   * lease, and a write whose reply was lost cannot land long after it was sent. A client whose
   * clock is further off is refused once, reads the server's clock and tries again. Wide (half
   * the lease, at most 5 s) only on a retry after a refusal for lateness, so that a slow network
   * delays a lock rather than failing it.
   */
  tolerance(leaseMs: number, relaxed = false): number {
    const wide = Math.max(1, Math.min(Math.floor(leaseMs / 2), MAX_TOLERANCE));
    if (relaxed) return wide;
    return Math.min(wide, Math.ceil(TIGHT_TOLERANCE + 4 * (this.smoothedRtt ?? ASSUMED_RTT)));
  }

  /** Drops both bounds (the local clock stepped backwards): nothing is known until the next reply. */
  private forget(): void {
    this.low = undefined;
    this.high = undefined;
  }

  /** The smoothed round-trip time, in ms (undefined before any reply). */
  roundTrip(): number | undefined {
    return this.smoothedRtt;
  }
}

interface Anchor {
  readonly server: number;
  readonly local: number;
}

/**
 * Largest rate difference assumed between the local monotonic clock and the server's clock:
 * 1,000 ppm, twice what NTP may slew a Linux clock (500 ppm).
 */
export const MAX_DRIFT = 0.001;
/** Largest stamp tolerance, in ms. */
export const MAX_TOLERANCE = 5_000;
/** The fixed part of the stamp tolerance, in ms. */
export const TIGHT_TOLERANCE = 100;
/** The round trip assumed before the first reply, in ms. */
const ASSUMED_RTT = 25;

function lowerAt(anchor: Anchor, now: number): number {
  const elapsed = Math.max(0, now - anchor.local);
  return anchor.server + elapsed * (1 - MAX_DRIFT);
}

function upperAt(anchor: Anchor, now: number): number {
  const elapsed = Math.max(0, now - anchor.local);
  return anchor.server + elapsed * (1 + MAX_DRIFT);
}
