import { NEVER } from './lock-data';

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
 *
 * **Several clocks** (a sharded cluster: `$$NOW` is the clock of the mongos that routed a command,
 * `$currentDate` the clock of the shard's primary that applied it; every router and every shard
 * has its own). The deployment is assumed to keep every clock within {@link skew} ms of every
 * shard primary's (`maxClockSkew`). Each reply is then widened by `skew` on both sides, so that the
 * bounds hold for the clock of whichever shard holds a document; the clock a server checks a stamp
 * against (a router's `$$NOW`) lies within `skew` of it again. Hence, with `D = skew`:
 *
 * - {@link stamp} is the lower bound minus `D`: at or below every router's `$$NOW` (the server's
 *   check passes) and at least `D` below the document's own clock, so that an entry the stamp
 *   judges expired has expired by `D` on the document's clock, and a guarded write checked by a
 *   router up to `D` behind it (`exp > $$NOW`) can no longer match it either;
 * - {@link remaining} is the expiry minus the upper bound minus `D`: while it is positive, no
 *   router's `$$NOW` has reached the expiry, so the holder's own guarded writes still match and
 *   nobody can have judged its entry expired;
 * - {@link expiry} adds `4 D` to the lease (the width the widening costs: a stamp taken `D` low,
 *   bounds `2 D` wide, `D` off the end), so that a holder still counts on its whole lease. Only a
 *   lock nobody releases (a crashed holder) is taken over later, by about `4 D`;
 * - {@link tolerance} grows by `4 D`: a stamp `D` below the lower bound is up to `4 D` plus the
 *   bounds' width below a router `D` ahead of the document's clock.
 *
 * With one clock (a standalone server or a replica set: `$$NOW` and `$currentDate` are the
 * primary's) `D` is 0 and none of this costs anything. Replies that show a router's `$$NOW` (a
 * read) and a shard's `$currentDate` (a write) are also kept apart, unwidened, so that a skew the
 * assumption does not cover is noticed ({@link excessSkew}). A router's clock enters the bounds
 * only within `D` of a shard's: a read beyond it is kept apart only, and what reads said before
 * the first write is replaced by that write, so that no stamp comes from a clock beyond `D`.
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
  /** The largest skew assumed between the deployment's clocks, in ms (`maxClockSkew`; 0: one clock). */
  private skewMs = 0;
  /** Whether a read's `$$NOW` and a write's `$currentDate` may come from different clocks (a sharded cluster): then their gap is watched. */
  private twoClocks = false;
  /** Unwidened bounds from each kind of reply, to measure the skew between a router's and a shard's clock. */
  private readonly raw: Record<ClockSource, Bounds | undefined> = { read: undefined, write: undefined };

  constructor(private readonly localNow: () => number) {}

  /** The largest skew assumed between the deployment's clocks, in ms (0: one clock). */
  get skew(): number {
    return this.skewMs;
  }

  /**
   * Sets the skew assumed between the deployment's clocks (`maxClockSkew`, once the deployment is
   * known), widening the bounds already kept; `twoClocks` says whether reads and writes may show
   * different clocks (a sharded cluster), whose gap is then watched.
   */
  assumeSkew(skewMs: number, twoClocks: boolean): void {
    const widen = skewMs - this.skewMs;
    if (this.low && this.high && widen > 0) {
      this.low = { server: this.low.server - widen, local: this.low.local };
      this.high = { server: this.high.server + widen, local: this.high.local };
    }
    this.skewMs = skewMs;
    this.twoClocks = twoClocks;
  }

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

  /** Whether a read's `$$NOW` and a write's `$currentDate` may come from different clocks (a sharded cluster). */
  get severalClocks(): boolean {
    return this.twoClocks;
  }

  /** True once replies showed both a router's clock (a read's `$$NOW`) and a shard's (a write's `$currentDate`). */
  get sawBothClocks(): boolean {
    return this.raw.read !== undefined && this.raw.write !== undefined;
  }

  /**
   * With several clocks: true when the newest shard clock this client saw is so old that the
   * drift allowed since ({@link MAX_DRIFT} each way) could hide a quarter of the skew assumed. A
   * read is then no longer checked against it: it stays out of the bounds until a fresh shard
   * clock is seen (a lock object idle for minutes, then routed through a mongos far ahead).
   */
  get shardClockStale(): boolean {
    const write = this.raw.write;
    if (!this.twoClocks || !write) return false;
    return (this.local() - write.low.local) * 2 * MAX_DRIFT > this.skewMs / 4;
  }

  /**
   * Learns from a reply carrying the server's time `serverNow`, sent at `sentAt` and arrived at
   * `arrivedAt` (local ms): a write's `$currentDate` (`source` `write`: the clock of the server that
   * applied it) or a read's `$$NOW` (`read`: on a sharded cluster, the routing mongos's clock).
   * With several clocks, a read further than the skew assumed from the shards' clocks is kept
   * apart only, and the first write replaces what reads alone said.
   */
  observe(serverNow: Date, sentAt: number, arrivedAt: number, source: ClockSource = 'write'): void {
    const server = serverNow.getTime();
    const now = this.local();
    // A reply timed across a backward step of the local clock proves nothing.
    if (!Number.isFinite(server) || arrivedAt < sentAt || now < arrivedAt) return;
    const rtt = arrivedAt - sentAt;
    this.smoothedRtt = this.smoothedRtt === undefined ? rtt : this.smoothedRtt + (rtt - this.smoothedRtt) / 8;
    const seen: Bounds = { low: { server, local: arrivedAt }, high: { server: server + 1, local: sentAt } };
    const firstShardClock = this.twoClocks && source === 'write' && !this.raw.write;
    this.raw[source] = tightest(this.raw[source], seen, now);
    // A router's clock beyond the skew assumed stays out of the bounds (excessSkew reports it); reads alone give way to a shard's clock.
    if (this.twoClocks && source === 'read' && this.raw.write && (this.shardClockStale || this.excessSkew() !== undefined)) return;
    if (firstShardClock) this.low = this.high = undefined;
    const widened = tightest(
      this.low && this.high ? { low: this.low, high: this.high } : undefined,
      { low: { server: server - this.skewMs, local: arrivedAt }, high: { server: server + 1 + this.skewMs, local: sentAt } },
      now,
    );
    this.low = widened.low;
    this.high = widened.high;
  }

  /**
   * On a sharded cluster, the gap this client measured between a router's clock (a read's `$$NOW`)
   * and a shard's (a write's `$currentDate`) when it exceeds the skew assumed, in ms (positive:
   * the router is ahead); undefined otherwise. Each bound is the newest reply of its kind, so the
   * gap is at least this large, give or take their round trips.
   */
  excessSkew(): number | undefined {
    const { read, write } = this.raw;
    if (!this.twoClocks || !read || !write) return undefined;
    const now = this.local();
    const atLeast = lowerAt(read.low, now) - upperAt(write.high, now);
    const atMost = upperAt(read.high, now) - lowerAt(write.low, now);
    if (atLeast > this.skewMs) return Math.floor(atLeast);
    if (atMost < -this.skewMs) return Math.ceil(atMost);
    return undefined;
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
    const base = relaxed ? wide : Math.min(wide, Math.ceil(TIGHT_TOLERANCE + 4 * (this.smoothedRtt ?? ASSUMED_RTT)));
    return base + 4 * this.skewMs;
  }

  /** The widest tolerance any lease gets: how far behind `$$NOW` any stamp may be when its write runs. */
  widestTolerance(): number {
    return MAX_TOLERANCE + 4 * this.skewMs;
  }

  /**
   * A stamp for a write the server checks against its `$$NOW` (ms): the lower bound minus the
   * skew, at or below every router's clock, and the skew below the locked document's own.
   */
  stamp(): number {
    return this.lower() - this.skewMs;
  }

  /** The expiry of a lease of `lease` ms stamped at `stamp` ({@link stamp}); `Infinity`: none. */
  expiry(stamp: number, lease: number): number {
    return Number.isFinite(lease) ? stamp + lease + 4 * this.skewMs : NEVER;
  }

  /** The lease a lock stamped `stamp` and ending at `expiresAt` was given, in ms ({@link expiry} the other way round). */
  leaseOf(stamp: number, expiresAt: number): number {
    return expiresAt - stamp - 4 * this.skewMs;
  }

  /** ms left of a lease ending at `expiresAt` before any clock that judges it may have reached its end (0 or less: it may have). */
  remaining(expiresAt: number): number {
    return expiresAt - this.upper() - this.skewMs;
  }

  /** ms until every clock that checks stamps (each router's `$$NOW`) is past `ms` by the lower bound (0 or less: it is). */
  untilPast(ms: number): number {
    return ms + 1 - this.stamp();
  }

  /** Drops both bounds (the local clock stepped backwards): nothing is known until the next reply. */
  private forget(): void {
    this.low = undefined;
    this.high = undefined;
    this.raw.read = undefined;
    this.raw.write = undefined;
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

/** A lower and an upper anchor. */
interface Bounds {
  readonly low: Anchor;
  readonly high: Anchor;
}

/** What a reply's time comes from: a write's `$currentDate`, or a read's `$$NOW`. */
export type ClockSource = 'write' | 'read';

/**
 * The tighter of `kept` and `seen` at local time `now`; `seen` alone when they contradict each
 * other (the clock moved against what it said before: trust only the newest reply).
 */
function tightest(kept: Bounds | undefined, seen: Bounds, now: number): Bounds {
  if (!kept) return seen;
  const low = lowerAt(seen.low, now) > lowerAt(kept.low, now) ? seen.low : kept.low;
  const high = upperAt(seen.high, now) < upperAt(kept.high, now) ? seen.high : kept.high;
  return lowerAt(low, now) > upperAt(high, now) ? seen : { low, high };
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
