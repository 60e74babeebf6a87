import type { ChangeFeed } from './change-feed';
import { keyedExactly, keyOf } from './document-key';
import { HeldLocks } from './held-locks';
import { RemoteWakeUps } from './remote-wake-ups';
import { ranked, Waiter } from './waiter';

/**
 * The acquisitions of this process that wait for a document, so that a release in this process
 * hands the document over at once instead of after a polling delay. A wake-up is only a hint: the
 * woken waiter tries again, and the server decides.
 */
export class LocalWaiters {
  private readonly byDocument = new Map<string, Set<Waiter>>();
  /** Who only wants to hear of releases (a group waiting for a document it will not take at once), by document. */
  private readonly watchers = new Map<string, Set<{ readonly blockedBy: ReadonlySet<string>; readonly wake: () => void }>>();
  /** Hand-overs in a row, by document (see {@link COHORT_BOUND}). */
  private readonly handedInRow = new Map<string, number>();
  /** Locks held in this process. */
  private readonly held: HeldLocks;

  /** Changes made by other processes, heard while someone waits here: each may nudge the first waiter of the changed document. */
  private readonly remote: RemoteWakeUps | undefined;
  /** @param serverNow a lower bound of the server's clock, to let a lease that ran out stop counting. */
  constructor(
    private readonly serverNow: () => number,
    feed?: ChangeFeed,
  ) {
    this.held = new HeldLocks(serverNow);
    this.remote = feed && new RemoteWakeUps(feed, this.byDocument, (key, waiter) => this.held.blocks(key, waiter.blockedBy));
  }

  /** True while this process's change stream on the collection is open (or opening): it wakes waiters on changes made elsewhere. */
  get streaming(): boolean {
    return this.remote?.streaming ?? false;
  }

  /**
   * True while a lock on document `id` of one of `tags` is held in this process and its lease has
   * not ended: its release will wake a waiter, and a refusal there is a conflict.
   */
  heldHere(id: unknown, tags: ReadonlySet<string>): boolean {
    return this.held.blocks(keyOf(id), tags);
  }

  /** When the leases of the locks of one of `tags` held here on document `id` end (server ms), if any is held ({@link HeldLocks.until}). */
  heldUntil(id: unknown, tags: ReadonlySet<string>): number | undefined {
    return this.held.until(keyOf(id), tags);
  }

  /** The tickets of this process's fair waiters of document `id` (their ids). */
  localTickets(id: unknown): Set<string> {
    const ids = new Set<string>();
    for (const waiter of this.byDocument.get(keyOf(id)) ?? []) ids.add(waiter.rankId);
    return ids;
  }

  /** True when no waiter of document `id` in this process ranks before `waiter`. */
  firstInLine(id: unknown, waiter: Waiter): boolean {
    for (const other of this.byDocument.get(keyOf(id)) ?? []) if (other !== waiter && other.before(waiter)) return false;
    return true;
  }

  /**
   * The waiter a release here of lock `tag` on document `id` hands the lock to: the first-ranked
   * waiter it blocks, if that one waits for a `tag` lock, accepts a hand-over and is asleep (one
   * in the middle of an attempt is handed nothing: its own attempt is on its way; one of another
   * tag is woken by a plain release instead).
   */
  grantee(id: unknown, tag: string): Waiter | undefined {
    if (!keyedExactly(id)) return undefined;
    let first: Waiter | undefined;
    for (const waiter of this.byDocument.get(keyOf(id)) ?? []) {
      if (waiter.blockedBy.has(tag) && (!first || waiter.before(first))) first = waiter;
    }
    return first?.tag === tag && first.accepts ? first : undefined;
  }

  /** Lock `lockId` on document `id` was handed over to a waiter here: it no longer counts as held (the waiter's lock will), and nobody is woken. */
  handedOver(id: unknown, lockId: string): void {
    this.held.remove(keyOf(id), lockId);
    // Counted while someone waits here (a grantee that gave up meanwhile may have been the last).
    if (this.byDocument.has(keyOf(id))) this.handedInRow.set(keyOf(id), (this.handedInRow.get(keyOf(id)) ?? 0) + 1);
  }

  /** True when a release here of document `id` may hand it to a waiter here: the cohort's bound is not reached (see {@link COHORT_BOUND}). */
  mayHandOver(id: unknown): boolean {
    return (this.handedInRow.get(keyOf(id)) ?? 0) < COHORT_BOUND;
  }

  /**
   * Lock `lockId` of `tag` on document `id` was released here at the cohort's bound, with waiters
   * here: they are woken only after {@link YIELD_MS}, so that a waiter of another process polling
   * meanwhile gets its turn.
   */
  yielded(id: unknown, tag: string, lockId: string): void {
    this.handedInRow.delete(keyOf(id));
    const key = keyOf(id);
    this.held.remove(key, lockId);
    setTimeout(() => this.wakeKey(key, tag), YIELD_MS).unref();
  }

  /** How many acquisitions of this process wait for document `id` with a lock of one of `tags`. */
  queued(id: unknown, tags: ReadonlySet<string>): number {
    return [...(this.byDocument.get(keyOf(id)) ?? [])].filter((waiter) => tags.has(waiter.tag)).length;
  }

  /** Lock `lockId` of `tag` on document `id` was won in this process, until `expiresAt` (server ms). */
  acquired(id: unknown, lockId: string, tag: string, expiresAt: number): void {
    const key = keyOf(id);
    this.held.add(key, lockId, tag, expiresAt);
    this.remote?.won(key);
  }

  /**
   * Calls `wake` (once) at the next release in this process of a lock of one of `blockedBy` on
   * document `id`, without taking part in the waiters' hand-over (it takes no wake-up from them);
   * returns the function that stops watching.
   */
  watch(id: unknown, blockedBy: ReadonlySet<string>, wake: () => void): () => void {
    const key = keyOf(id);
    let watchers = this.watchers.get(key);
    if (!watchers) this.watchers.set(key, (watchers = new Set()));
    const watcher = { blockedBy, wake };
    watchers.add(watcher);
    return () => {
      watchers.delete(watcher);
      if (watchers.size === 0 && this.watchers.get(key) === watchers) this.watchers.delete(key);
    };
  }

  /** Lock `lockId` of `tag` was let go here by a call that did not name its document (no `_id`): finds its document, and wakes as below. */
  releasedLock(lockId: string, tag: string, permits = 1): void {
    const key = this.held.take(lockId);
    if (key !== undefined) this.wakeKey(key, tag, permits);
  }

  /**
   * A lock of `tag` on document `id` was let go in this process (released, or found lost; all of
   * them without `lockId`): wakes the first waiter it may have blocked (for a limited tag, the
   * first `permits` waiters: each may fit in what the lock held).
   */
  released(id: unknown, tag: string, lockId?: string, permits = 1): void {
    const key = keyOf(id);
    this.handedInRow.delete(key);
    this.held.remove(key, lockId);
    this.wakeKey(keyOf(id), tag, permits);
  }

  /**
   * Joins the waiters of document `id` for a lock of `tag`. `blockedBy` are the tags whose locks it waits for;
   * `rank` orders the waiters (lowest woken first): the time since they came, or in fair mode
   * their ticket; `reliesOnStream` says whether it may sleep long while the change stream covers
   * its document (see Polling); `listen`: whether the change stream carries its document from now
   * (else from {@link listen}, once it waits). Returns the waiter: `sleep(ms, signal, left)` resolves after `ms` or when woken;
   * `leave()` when done.
   */
  join(id: unknown, tag: string, blockedBy: ReadonlySet<string>, rank: () => readonly [number, string], nudgeable: () => boolean = () => true, reliesOnStream: () => boolean = () => true, listen = true): Waiter {
    const key = keyOf(id);
    let waiters = this.byDocument.get(key);
    if (!waiters) this.byDocument.set(key, (waiters = new Set()));
    const waiter = new Waiter(
      rank,
      tag,
      blockedBy,
      (passOn) => {
        waiters.delete(waiter);
        if (waiters.size === 0 && this.byDocument.get(key) === waiters) {
          this.byDocument.delete(key);
          this.handedInRow.delete(key); // nobody waits here: the next contention starts afresh
          this.remote?.nobodyWaits(key);
        }
        // A wake-up it was given but did not turn into a lock goes to the next waiter.
        if (passOn) this.wakeKey(key, undefined);
      },
      () => this.heldHere(id, blockedBy),
      nudgeable,
      () => this.remote?.missed(key),
      this.remote?.streamOf(id, this.serverNow, reliesOnStream),
    );
    waiters.add(waiter);
    if (listen) this.listen(id);
    return waiter;
  }

  /** A waiter of document `id` waits (it was refused, or queues behind others here): the change stream carries the document's changes. */
  listen(id: unknown): void {
    this.remote?.open(id);
  }

  /** Wakes the `count` first-ranked waiters of the document `key` that a `tag` lock blocks (any waiter without `tag`). */
  private wakeKey(key: string, tag: string | undefined, count = 1): void {
    if (tag !== undefined) for (const watcher of this.watchers.get(key) ?? []) if (watcher.blockedBy.has(tag)) watcher.wake();
    const waiters = this.byDocument.get(key);
    if (!waiters || waiters.size === 0) return;
    const blocked = [...waiters].filter((waiter) => tag === undefined || waiter.blockedBy.has(tag));
    for (const waiter of ranked(blocked).slice(0, count)) waiter.wake();
  }
}

/**
 * Hand-overs in a row a process makes on a document before it yields it: lock cohorting (Dice,
 * Marathe and Shavit, PPoPP 2012), non-fair mode only (in fair mode the server's queue decides).
 * The yield is a release that wakes this process's waiters only {@link YIELD_MS} later, a window
 * for the waiters of other processes, which poll. The bound is fixed: a process cannot tell
 * whether others wait (their refused attempts write nothing), and a bound that grew while nobody
 * else came would shut them out once they do.
 */
export const COHORT_BOUND = 32;
/** How long a yield leaves a document to the waiters of other processes before this process's waiters are woken, in ms. */
export const YIELD_MS = 3;
