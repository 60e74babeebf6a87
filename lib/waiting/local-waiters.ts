import type { Acquired } from '../engine/acquired';
import type { GranteeTerms } from '../engine/hand-over';
import { sleepUnlessWoken } from './wait-options';

/**
 * The acquisitions of this process that wait for a document, so that a release in this process
 * hands the document over at once instead of after a polling delay. A wake-up is only a hint: the
 * woken waiter tries again, and the server decides.
 */
export class LocalWaiters {
  private readonly byDocument = new Map<string, Set<Waiter>>();
  /** Who only wants to hear of releases (a group waiting for a document it will not take at once), by document. */
  private readonly watchers = new Map<string, Set<{ readonly blockedBy: ReadonlySet<string>; readonly wake: () => void }>>();
  /** Locks held in this process, by document, then by lock id: their tag and lease end (server ms). */
  private readonly held = new Map<string, Map<string, { readonly tag: string; readonly expiresAt: number }>>();

  /** @param serverNow a lower bound of the server's clock, to let a lease that ran out stop counting. */
  constructor(private readonly serverNow: () => number) {}

  /**
   * True while a lock on document `id` of one of `tags` is held in this process and its lease has
   * not ended: its release will wake a waiter, and a refusal there is a conflict.
   */
  heldHere(id: unknown, tags: ReadonlySet<string>): boolean {
    const locks = this.held.get(keyOf(id));
    if (!locks) return false;
    const now = this.serverNow();
    for (const [lockId, lock] of locks) {
      if (lock.expiresAt <= now) locks.delete(lockId); // ran out without a release here
      else if (tags.has(lock.tag)) return true;
    }
    if (locks.size === 0) this.held.delete(keyOf(id));
    return false;
  }

  /** True when no waiter of document `id` in this process ranks before `waiter`. */
  firstInLine(id: unknown, waiter: Waiter): boolean {
    for (const other of this.byDocument.get(keyOf(id)) ?? []) if (other !== waiter && other.before(waiter)) return false;
    return true;
  }

  /**
   * The waiter a release here of lock `tag` on document `id` hands the lock to: the first-ranked
   * waiter for a `tag` lock that accepts a hand-over and is asleep (one in the middle of an
   * attempt is handed nothing: its own attempt is on its way), if any.
   */
  grantee(id: unknown, tag: string): Waiter | undefined {
    let first: Waiter | undefined;
    for (const waiter of this.byDocument.get(keyOf(id)) ?? []) {
      if (waiter.tag === tag && waiter.accepts && (!first || waiter.before(first))) first = waiter;
    }
    return first;
  }

  /** Lock `lockId` on document `id` was handed over to a waiter here: it no longer counts as held (the waiter's lock will), and nobody is woken. */
  handedOver(id: unknown, lockId: string): void {
    const locks = this.held.get(keyOf(id));
    locks?.delete(lockId);
    if (locks?.size === 0) this.held.delete(keyOf(id));
  }

  /** How many acquisitions of this process wait for document `id` with a lock of one of `tags`. */
  queued(id: unknown, tags: ReadonlySet<string>): number {
    let count = 0;
    for (const waiter of this.byDocument.get(keyOf(id)) ?? []) if (tags.has(waiter.tag)) count++;
    return count;
  }

  /** Lock `lockId` of `tag` on document `id` was won in this process, until `expiresAt` (server ms). */
  acquired(id: unknown, lockId: string, tag: string, expiresAt: number): void {
    const key = keyOf(id);
    let locks = this.held.get(key);
    if (!locks) this.held.set(key, (locks = new Map()));
    locks.set(lockId, { tag, expiresAt });
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

  /**
   * Lock `lockId` of `tag` was let go in this process by a call that did not name its document
   * (a filter without `_id`): finds its document among those held here, and wakes as below.
   */
  releasedLock(lockId: string, tag: string, permits = 1): void {
    for (const [key, locks] of this.held) {
      if (!locks.has(lockId)) continue;
      locks.delete(lockId);
      if (locks.size === 0) this.held.delete(key);
      this.wakeKey(key, tag, permits);
      return;
    }
  }

  /**
   * A lock of `tag` on document `id` was let go in this process (released, or found lost; all of
   * them without `lockId`): wakes the first waiter it may have blocked (for a limited tag, the
   * first `permits` waiters: each may fit in what the lock held).
   */
  released(id: unknown, tag: string, lockId?: string, permits = 1): void {
    const key = keyOf(id);
    const locks = this.held.get(key);
    if (locks) {
      if (lockId === undefined) locks.clear();
      else locks.delete(lockId);
      if (locks.size === 0) this.held.delete(key);
    }
    this.wakeKey(keyOf(id), tag, permits);
  }

  /**
   * Joins the waiters of document `id` for a lock of `tag`. `blockedBy` are the tags whose locks it waits for;
   * `rank` orders the waiters (lowest woken first): the time since they came, or in fair mode
   * their ticket. Returns the waiter: `sleep(ms, signal, left)` resolves after `ms` or when woken;
   * `leave()` when done.
   */
  join(id: unknown, tag: string, blockedBy: ReadonlySet<string>, rank: () => readonly [number, string]): Waiter {
    const key = keyOf(id);
    let waiters = this.byDocument.get(key);
    if (!waiters) this.byDocument.set(key, (waiters = new Set()));
    const waiter = new Waiter(
      rank,
      tag,
      blockedBy,
      (passOn) => {
        waiters.delete(waiter);
        if (waiters.size === 0 && this.byDocument.get(key) === waiters) this.byDocument.delete(key);
        // A wake-up it was given but did not turn into a lock goes to the next waiter.
        if (passOn) this.wakeKey(key, undefined);
      },
      () => this.heldHere(id, blockedBy),
    );
    waiters.add(waiter);
    return waiter;
  }

  /** Wakes the `count` first-ranked waiters of the document `key` that a `tag` lock blocks (any waiter without `tag`). */
  private wakeKey(key: string, tag: string | undefined, count = 1): void {
    if (tag !== undefined) for (const watcher of this.watchers.get(key) ?? []) if (watcher.blockedBy.has(tag)) watcher.wake();
    const waiters = this.byDocument.get(key);
    if (!waiters || waiters.size === 0) return;
    const blocked = [...waiters].filter((waiter) => tag === undefined || waiter.blockedBy.has(tag));
    for (const waiter of blocked.sort((a, b) => (a.before(b) ? -1 : b.before(a) ? 1 : 0)).slice(0, count)) waiter.wake();
  }
}

/**
 * How long a waiter sleeps, at most, while a lock that blocks it is held in this process: that
 * holder's release wakes it, so polling would only add refused attempts (a holder that never
 * releases is noticed this often, and its lease end stops it counting).
 */
export const HELD_HERE_SLEEP = 1_000;

/** One waiting acquisition. */
export class Waiter {
  private wakeUp: (() => void) | undefined;
  private woken = false;
  /** Woken by a release since its last attempt: that attempt should say why, if it is refused. */
  private fresh = false;
  /** Holds a wake-up it has not turned into a lock yet. */
  private holdsWakeUp = false;
  /** A hand-over to it on its way: the lock it resolves (undefined: none was handed, try again). */
  private grant: Promise<Acquired | undefined> | undefined;
  /** What it asks for when a lock is handed over to it; undefined: its acquisition cannot be handed one. */
  terms: GranteeTerms | undefined;

  constructor(
    private readonly rank: () => readonly [number, string],
    /** The tag it waits to lock. */
    readonly tag: string,
    /** The tags whose locks it waits for. */
    readonly blockedBy: ReadonlySet<string>,
    private readonly left: (passOn: boolean) => void,
    private readonly heldHere: () => boolean,
  ) {}

  /** Leaves the waiters; `won` or not, a wake-up it still holds goes to the next one if it did not win. */
  leave(won: boolean): void {
    this.left(!won && this.holdsWakeUp);
  }

  /** True once after a release woke it: the attempt that follows should explain a refusal. */
  takeWakeUp(): boolean {
    const fresh = this.fresh;
    this.fresh = false;
    return fresh;
  }

  /**
   * Resolves after `ms` (longer while a lock that blocks it is held in this process, whose release
   * wakes it, but never past `left`, what is left of the wait), or as soon as a local release
   * wakes it; rejects when `signal` aborts.
   */
  sleep(ms: number, signal?: AbortSignal, left = ms): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    if (this.heldHere()) ms = Math.min(left, Math.max(ms, HELD_HERE_SLEEP));
    return sleepUnlessWoken(ms, signal, (wake) => {
      this.wakeUp = wake;
      return () => (this.wakeUp = undefined);
    });
  }

  /** True when a release may hand it the lock now: it accepts hand-overs, sleeps between attempts, and has none on its way. */
  get accepts(): boolean {
    return this.terms !== undefined && this.wakeUp !== undefined && this.grant === undefined;
  }

  /** A release hands it the lock: `grant` resolves the lock (or undefined: it was not handed); wakes it. */
  handOver(grant: Promise<Acquired | undefined>): void {
    this.grant = grant;
    this.wake();
  }

  /** The hand-over on its way to it, once (its next attempt awaits it instead of sending one). */
  takeGrant(): Promise<Acquired | undefined> | undefined {
    const grant = this.grant;
    this.grant = undefined;
    return grant;
  }

  /** Wakes it now; a wake-up that comes while it is not asleep ends its next sleep at once. */
  wake(): void {
    this.fresh = true;
    this.holdsWakeUp = true;
    if (this.wakeUp) this.wakeUp();
    else this.woken = true;
  }

  /** True when this waiter ranks before `other`. */
  before(other: Waiter): boolean {
    const [a, aId] = this.rank();
    const [b, bId] = other.rank();
    return a < b || (a === b && aId < bId);
  }
}

/** An exact map key for a document `_id`: a string, number, Date, ObjectId or compound value. */
function keyOf(id: unknown): string {
  if (id instanceof Date) return `date:${id.getTime()}`;
  if (typeof id === 'object' && id !== null) return `object:${JSON.stringify(id)}`; // ObjectId: its hex (toJSON)
  return `${typeof id}:${String(id)}`;
}
