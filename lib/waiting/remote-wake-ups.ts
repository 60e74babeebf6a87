import { FeedTap, SOME_DOCUMENT, type ChangeFeed } from './change-feed';
import { keyOf } from './document-key';
import { firstRanked, type Waiter } from './waiter';

/**
 * How far a document's nudges back off: after `k` nudged attempts of this process on it were
 * refused in a row, each within {@link NUDGE_MISS_MEMORY_MS} of the last, a change elsewhere nudges
 * its first waiter with probability 2^-min(k - 1, this). Every process hears every change, so
 * without it each release would send the first waiter of every process at once, and all but one
 * would be refused (binary exponential backoff, as Ethernet resolves collisions): with P processes
 * contending, about one nudged attempt per change. One miss costs nothing: a lone waiter is woken
 * in vain by every acquisition it hears of, and the release that follows must still wake it.
 */
export const NUDGE_BACKOFF_STEPS = 4;
/**
 * How long a refused nudged attempt counts (ms): a change that comes later nudges for sure. So a
 * lone waiter that was nudged in vain by another's acquisition is still nudged by its release, and
 * only a document that changes this often backs off.
 */
export const NUDGE_MISS_MEMORY_MS = 64;

/**
 * How soon a waiter blocked by a lock held in this process tries after a change elsewhere, unless
 * that lock's release here wakes it first (ms): the change may be another process taking the lock
 * away, which no release here would tell.
 */
export const HELD_HERE_NUDGE_MS = 100;

/**
 * Wake-ups from changes other processes make (heard on a {@link ChangeFeed} while someone waits
 * here): a change to a document nudges its first waiter in this process, unless that one is not
 * nudgeable (a fair waiter with others ahead) or the backoff above skips it; while a lock that
 * blocks it is held here (whose release wakes it), only {@link HELD_HERE_NUDGE_MS} later. A nudge is a hint: polling goes on as without it.
 */
export class RemoteWakeUps {
  private readonly tap: FeedTap;
  private readonly feed: ChangeFeed;
  /** Refused nudged attempts in a row by document key, and when the last was refused (reset when this process wins the document; fair waiters with a ticket never back off: the queue decides). */
  private readonly misses = new Map<string, { count: number; at: number }>();

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

  /** Someone waits here: listen. */
  open(): void {
    this.tap.open();
  }

  /** Nobody waits for document `key` any more: its backoff starts afresh; when nobody waits at all, stop listening. */
  nobodyWaits(key: string): void {
    this.misses.delete(key);
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
    for (const key of id === SOME_DOCUMENT ? [...this.waitersByDocument.keys()] : [keyOf(id)]) {
      const first = firstRanked(this.waitersByDocument.get(key) ?? []);
      if (!first?.nudgeable()) continue;
      if (this.blockedHere(key, first)) {
        first.nudgeWithin(HELD_HERE_NUDGE_MS);
        continue;
      }
      const misses = this.misses.get(key);
      const steps = first.rankId === '' && misses && performance.now() - misses.at < NUDGE_MISS_MEMORY_MS ? Math.min(misses.count - 1, NUDGE_BACKOFF_STEPS) : 0;
      if (Math.random() < 2 ** -steps) first.nudge();
    }
  }
}
