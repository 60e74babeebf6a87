import { ANY_DOCUMENT, FeedTap, SOME_DOCUMENT, type ChangeFeed } from './change-feed';
import { keyOf } from './document-key';
import { firstRanked, type Waiter, type WaiterStream } from './waiter';

/**
 * How far a document's nudges back off: after `k` nudged attempts of this process on it were
 * refused in a row, each within {@link NUDGE_MISS_MEMORY_MS} of the last, a change elsewhere nudges
 * its first waiter with probability 2^-min(k - 1, this), and cuts the sleep of one it skips to a
 * short poll (Waiter.shorten). Every process hears every change, so
 * without it each release would send the first waiter of every process at once, and all but one
 * would be refused (binary exponential backoff, as Ethernet resolves collisions): with P processes
 * contending, about one nudged attempt per change. One miss costs nothing: a lone waiter may be
 * woken in vain (a change another process won), and the release that follows must still wake it.
 */
export const NUDGE_BACKOFF_STEPS = 4;
/**
 * How long a refused nudged attempt counts (ms): a change that comes later nudges for sure. So a
 * lone waiter that was nudged in vain by a change another won is still nudged by the next, and
 * only a document that changes this often backs off.
 */
export const NUDGE_MISS_MEMORY_MS = 64;

/**
 * How soon a waiter blocked by a lock held in this process tries after a change elsewhere, unless
 * that lock's release here wakes it first (ms): the change may be another process taking the lock
 * away, which no release here would tell.
 */
export const HELD_HERE_NUDGE_MS = 100;

/** How many waiters (the first of as many documents, in turn) one event that names no document nudges at once. */
export const UNPLACED_NUDGES = 4;
/** How soon a waiter nudged by an event that names no document may be nudged by another such event (ms): about the polling schedule's shortest gap at its cap. */
export const UNPLACED_NUDGE_GAP_MS = 75;

/**
 * Wake-ups from changes other processes make (heard on a {@link ChangeFeed} while someone waits
 * here, which carries the changes of the documents waited on here): a change to a document nudges
 * its first waiter in this process, unless that one is not nudgeable (a fair waiter with others
 * ahead) or the backoff above skips it; while a lock that blocks it is held here (whose release
 * wakes it), only {@link HELD_HERE_NUDGE_MS} later. A nudge is a hint: the waiter's poll goes on,
 * long while the stream is healthy (lib/waiting/wake-up-source.ts).
 *
 * A change whose event names no document (mongo-java-server's update events) is told to a bounded
 * few: it nudges the first waiters of at most {@link UNPLACED_NUDGES} documents, taken in turn
 * (round-robin), each at most once per {@link UNPLACED_NUDGE_GAP_MS}, and cuts the sleep of every
 * other first waiter to the polling schedule's short delay (Waiter.shorten: 75–150 ms, jittered).
 * So a process with few waiters is still woken at once, an event costs at most that many attempts
 * at once whatever the crowd, and a waiter it reaches tries at most about as often as it would
 * polling while such events keep coming: never every waiter of the process at once.
 * A stream that broke nudges every first waiter once.
 */
export class RemoteWakeUps {
  private readonly tap: FeedTap;
  private readonly feed: ChangeFeed;
  /** Refused nudged attempts in a row by document key, and when the last was refused (reset when this process wins the document; fair waiters with a ticket never back off: the queue decides). */
  private readonly misses = new Map<string, { count: number; at: number }>();
  /** Where the next event that names no document starts nudging, among the documents waited on. */
  private turn = 0;
  /** When each waiter was last nudged by an event that names no document (performance.now()). */
  private readonly unplacedAt = new WeakMap<Waiter, number>();
  /** The documents this process's stream carries, by key: the function that stops asking for each. */
  private readonly wanted = new Map<string, () => void>();

  constructor(
    feed: ChangeFeed,
    private readonly waitersByDocument: ReadonlyMap<string, ReadonlySet<Waiter>>,
    private readonly blockedHere: (key: string, waiter: Waiter) => boolean,
  ) {
    this.feed = feed;
    this.tap = new FeedTap(feed, (changed) => this.changed(changed));
  }

  /** True while the feed has a change stream open (or opening). */
  get streaming(): boolean {
    return this.feed.state === 'streaming';
  }

  /** Someone waits here on document `id`: the stream carries its changes; listen. */
  open(id: unknown): void {
    const key = keyOf(id);
    if (!this.wanted.has(key)) this.wanted.set(key, this.feed.want(id).unwant);
    this.tap.open();
  }

  /** The stream as a waiter of document `id` sees it (see Waiter): `reliedOn` says whether that waiter may rely on it. */
  streamOf(id: unknown, serverNow: () => number, reliedOn: () => boolean): WaiterStream {
    const key = keyOf(id);
    return {
      covers: (at) => this.feed.covers(key, at),
      afterRead: (since, then) => this.feed.afterRead(since, then),
      onLoss: (lost) => this.feed.onLoss(lost),
      serverNow,
      reliedOn,
    };
  }

  /** Nobody waits for document `key` any more: its backoff starts afresh, the stream stops carrying it; when nobody waits at all, stop listening. */
  nobodyWaits(key: string): void {
    this.misses.delete(key);
    this.wanted.get(key)?.();
    this.wanted.delete(key);
    if (this.waitersByDocument.size === 0) this.tap.close();
  }

  /** A nudged attempt on document `key` was refused. */
  missed(key: string): void {
    const now = performance.now();
    const last = this.misses.get(key);
    this.misses.set(key, { count: last && now - last.at < NUDGE_MISS_MEMORY_MS ? last.count + 1 : 1, at: now });
  }

  /** This process won a lock on document `key`. */
  won(key: string): void {
    this.misses.delete(key);
  }

  private changed(id: unknown): void {
    if (id === SOME_DOCUMENT) return this.unplaced();
    for (const key of id === ANY_DOCUMENT ? [...this.waitersByDocument.keys()] : [keyOf(id)]) {
      const first = firstRanked(this.waitersByDocument.get(key) ?? []);
      if (!first?.nudgeable()) continue;
      if (this.blockedHere(key, first)) {
        first.nudgeWithin(HELD_HERE_NUDGE_MS);
        continue;
      }
      const misses = this.misses.get(key);
      const steps = first.rankId === '' && misses && performance.now() - misses.at < NUDGE_MISS_MEMORY_MS ? Math.min(misses.count - 1, NUDGE_BACKOFF_STEPS) : 0;
      // Skipped, its sleep is cut to a short poll: it would sleep long (a safety poll) on a change it may well have won.
      if (Math.random() < 2 ** -steps) first.nudge();
      else first.shorten();
    }
  }

  /** A change that names no document: a few first waiters are nudged in turn, the others' sleeps cut short (see above). */
  private unplaced(): void {
    // A waiter blocked by a lock held here is woken by its release: its sleep is only cut short (as HELD_HERE_NUDGE_MS would).
    const firsts: Waiter[] = [];
    for (const [key, waiters] of this.waitersByDocument) {
      const first = firstRanked(waiters);
      if (!first?.nudgeable()) continue;
      if (this.blockedHere(key, first)) first.shorten();
      else firsts.push(first);
    }
    const now = performance.now();
    const start = firsts.length === 0 ? 0 : this.turn % firsts.length;
    let nudged = 0;
    for (let n = 0; n < firsts.length; n++) {
      const first = firsts[(start + n) % firsts.length]!;
      if (nudged < UNPLACED_NUDGES && now - (this.unplacedAt.get(first) ?? -Infinity) >= UNPLACED_NUDGE_GAP_MS) {
        nudged++;
        this.turn = start + n + 1;
        this.unplacedAt.set(first, now);
        first.nudge();
      } else first.shorten();
    }
  }
}
