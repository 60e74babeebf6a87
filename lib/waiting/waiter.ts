import type { Acquired } from '../engine/acquired';
import type { GranteeTerms } from '../engine/hand-over';
import { firstWakeUp, Latch, Polling, type StreamWatch } from './wake-up-source';
import { HandOverSlot } from './hand-over-slot';

/** The change stream as a waiter sees it: whether it covers the waiter's document since a moment, and how far the server answered (lib/waiting/change-feed.ts). */
export interface WaiterStream extends Omit<StreamWatch, 'covering' | 'leaseEndsIn'> {
  /** True when the stream tells of every change to the waiter's document made after local time `at`. */
  covers(at: number): boolean;
  /** A lower bound of the server's clock (ms). */
  serverNow(): number;
  /** False while the waiter must poll whatever the stream says: its filter does not name one `_id` (another document may come to match it), or a fair ticket paces it. */
  reliedOn(): boolean;
}

/** One waiting acquisition: it sleeps between attempts until one of its wake-up sources (lib/waiting/wake-up-source.ts) says it may try again. */
export class Waiter {
  /** Woken by a release in this process (or handed the lock by one). */
  private readonly releases = new Latch();
  /** Nudged by a change another process made (the change stream). */
  private readonly changes = new Latch();
  private readonly polling: Polling;
  /** Woken by a release since its last attempt: that attempt should say why, if it is refused. */
  private fresh = false;
  /** Holds a wake-up it has not turned into a lock yet. */
  private holdsWakeUp = false;
  /** Its last wake-up was a nudge (a change elsewhere) that no release here followed. */
  private nudged = false;
  /** The attempt underway was started by a nudge: if it sleeps again, the nudge missed. */
  private nudgedAttempt = false;
  /** A nudge on its way (see {@link nudgeWithin}). */
  private laterNudge: NodeJS.Timeout | undefined;
  /** A hand-over to it on its way. */
  private readonly slot = new HandOverSlot();
  /** What it asks for when a lock is handed over to it; undefined: its acquisition cannot be handed one. */
  terms: GranteeTerms | undefined;
  /** When its last attempt started (local ms): the end of its last sleep; undefined before its first sleep (its first attempt came before it joined). */
  private attemptSince: number | undefined;
  /** When the leases of the entries that last refused it end (server ms), if a read told. */
  private leaseEnd: number | undefined;
  /** Its refusals are known to be conflicts (a read explained the last one it could, or a lock held here refused it): only then may it sleep long. */
  private knowsWhy = false;
  /** A wake-up (a release here, a change elsewhere) came since its last refusal known to be a conflict. */
  private heardSinceKnown = false;

  constructor(
    private readonly rank: () => readonly [number, string],
    /** The tag it waits to lock. */
    readonly tag: string,
    /** The tags whose locks it waits for. */
    readonly blockedBy: ReadonlySet<string>,
    private readonly left: (passOn: boolean) => void,
    heldHere: () => boolean,
    /** False while a change elsewhere cannot be its turn (a fair waiter with others ahead in the queue): no nudge then. */
    readonly nudgeable: () => boolean = () => true,
    /** Told when an attempt a nudge started was refused (it sleeps again). */
    private readonly nudgeMissed: () => void = () => undefined,
    /** Its change stream: while it covers the waiter's document and answers, the waiter sleeps long (see Polling). */
    private readonly stream?: WaiterStream,
  ) {
    this.polling = new Polling(heldHere, stream && this.watch(stream));
  }

  private watch(stream: WaiterStream): StreamWatch {
    return {
      covering: () => this.knowsWhy && stream.reliedOn() && this.attemptSince !== undefined && stream.covers(this.attemptSince),
      afterRead: (since, then) => stream.afterRead(since, then),
      onLoss: (lost) => stream.onLoss(lost),
      leaseEndsIn: () => (this.leaseEnd === undefined ? undefined : this.leaseEnd - stream.serverNow()),
    };
  }

  /**
   * It was refused: `known` when that is known to be a conflict (a read explained it, or a lock
   * held here refused it), the blocking leases then ending at `leaseEnd` (server ms) if the read
   * said. A refusal nobody explained after a wake-up (the document may be gone, the clock off) is
   * not slept on long: the next attempt explains it, and the waiter keeps the short schedule until
   * then. Without a wake-up since the last known conflict, nothing was heard to change: it is
   * that conflict still (a deletion or a release is a change the stream tells).
   */
  refused(known: boolean, leaseEnd: number | undefined): void {
    if (known) {
      this.knowsWhy = true;
      this.heardSinceKnown = false;
      this.leaseEnd = leaseEnd;
    } else if (this.heardSinceKnown || !this.knowsWhy) {
      this.knowsWhy = false;
      if (this.stream?.reliedOn()) this.fresh = true;
    }
  }

  /** The stream heard a change it could not place (an event without `_id`): its sleep keeps to the short schedule (see Polling.shorten). */
  shorten(): void {
    this.heardSinceKnown = true;
    this.polling.shorten();
  }

  /** Leaves the waiters; `won` or not, a wake-up it still holds goes to the next one if it did not win. */
  leave(won: boolean): void {
    clearTimeout(this.laterNudge);
    this.left(!won && this.holdsWakeUp);
  }

  /** True once after a release woke it: the attempt that follows should explain a refusal. */
  takeWakeUp(): boolean {
    const fresh = this.fresh;
    this.fresh = false;
    return fresh;
  }

  /**
   * Resolves when a release here or a change elsewhere wakes it, or when its poll comes: after
   * `ms` (longer while a lock that blocks it is held in this process, whose release wakes it, but
   * never past `left`, what is left of the wait); rejects when `signal` aborts.
   */
  async sleep(ms: number, signal?: AbortSignal, left = ms): Promise<void> {
    if (this.nudgedAttempt) this.nudgeMissed();
    this.nudgedAttempt = false;
    // Its poll first: it reads whether a lock here blocks the waiter before any latch listens.
    await firstWakeUp([this.polling, this.releases, this.changes], { ms, left }, signal);
    this.attemptSince = performance.now();
    // After a long sleep (few attempts), its refusal is explained: the new leases' end, a missing
    // document, a clock that stepped (about as often as one in 8 on the polling schedule).
    if (this.polling.relied) this.fresh = true;
    // The blocking leases ended: the next refusal says whether they were extended (and until when).
    if (this.leaseEnd !== undefined && this.stream && this.leaseEnd <= this.stream.serverNow()) {
      this.leaseEnd = undefined;
      this.fresh = true;
    }
    // The last wake-up decides, whichever ended the sleep (a release here in the same turn as a nudge makes the attempt a release's).
    this.nudgedAttempt = this.nudged;
    this.nudged = false;
  }

  /** True when a release may hand it the lock now: it accepts hand-overs, its turn has come, it sleeps between attempts (or its ticket's take is on its way), and has none on its way. */
  get accepts(): boolean {
    return this.terms !== undefined && (this.terms.ready?.() ?? true) && (this.releases.listening || this.terms.placing?.() === true) && !this.slot.granted;
  }

  /** A release hands it the lock: `grant` resolves the lock (or undefined: it was not handed); wakes it. */
  handOver(grant: Promise<Acquired | undefined>): void {
    this.slot.give(grant);
    this.wake();
  }

  /** Resolves once a release hands it the lock (at once if one is on its way); `stop` drops the wait. */
  handedOver(): { readonly handed: Promise<void>; stop(): void } {
    return this.slot.handedOver();
  }

  /** True while a hand-over is on its way to it (not taken yet). */
  get granted(): boolean {
    return this.slot.granted;
  }

  /** The hand-over on its way to it, once (its next attempt awaits it instead of sending one). */
  takeGrant(): Promise<Acquired | undefined> | undefined {
    return this.slot.take();
  }

  /** A release here wakes it now; one that comes while it is not asleep ends its next sleep at once. */
  wake(): void {
    this.heardSinceKnown = true;
    this.cancelLaterNudge();
    this.changes.clear();
    this.nudged = false;
    this.fresh = true;
    this.holdsWakeUp = true;
    this.releases.ring();
  }

  /** A change made elsewhere wakes it: like {@link wake}, but its next refusal is not explained (the change may be anyone's acquisition). */
  nudge(): void {
    this.heardSinceKnown = true;
    this.cancelLaterNudge();
    this.releases.clear();
    this.nudged = true;
    this.holdsWakeUp = true;
    this.changes.ring();
  }

  /**
   * A change elsewhere while a lock that blocks it is held in this process: that lock's release
   * here will wake it, unless another process took the lock away (the CLI's release, a withdraw):
   * if still asleep and not woken in `ms`, it is nudged then (instead of sleeping on, up to
   * `HELD_HERE_SLEEP`).
   */
  nudgeWithin(ms: number): void {
    this.laterNudge ??= setTimeout(() => {
      this.laterNudge = undefined;
      if (this.releases.listening) this.nudge();
    }, ms).unref();
  }

  private cancelLaterNudge(): void {
    clearTimeout(this.laterNudge);
    this.laterNudge = undefined;
  }

  /** The id part of its rank: its fair ticket's id (empty without one). */
  get rankId(): string {
    return this.rank()[1];
  }

  /** True when this waiter ranks before `other`. */
  before(other: Waiter): boolean {
    const [a, aId] = this.rank();
    const [b, bId] = other.rank();
    return a < b || (a === b && aId < bId);
  }
}

/** The first-ranked of `waiters` (undefined for none), without sorting them all. */
export function firstRanked(waiters: Iterable<Waiter>): Waiter | undefined {
  let first: Waiter | undefined;
  for (const waiter of waiters) if (!first || waiter.before(first)) first = waiter;
  return first;
}

/** `waiters` in the order they are woken: the first-ranked first. */
export function ranked(waiters: Iterable<Waiter>): Waiter[] {
  return [...waiters].sort((a, b) => (a.before(b) ? -1 : b.before(a) ? 1 : 0));
}
