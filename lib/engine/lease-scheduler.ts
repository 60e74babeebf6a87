import type { ResolvedCallOptions } from '../common/options';
import { LeaseBatch, type BatchExtension, type BatchMember, type Queued } from './lease-batch';
import type { LockEngine } from './lock-engine';

/** How long a due extension may wait for others to join its batch, in ms. */
export const BATCH_WINDOW_MS = 50;
/** The most statements one bulk carries: a bigger batch is split. */
export const BATCH_CAP = 500;
/** Batches in flight at once before a batch of extensions not yet urgent waits; they go nearest expiry first. */
const MAX_IN_FLIGHT = 2;
/** Batches in flight at once before a batch of urgent extensions waits; they go oldest lock first. */
const MAX_URGENT_IN_FLIGHT = 4;
/** How long the client's attempts are held back after its keepers were seen behind, in ms (lib/engine/attempt-throttle.ts). */
const BEHIND_MS = 500;
/** Slack added to a batch's expected time before a lock is judged urgent, in ms. */
const URGENT_SLACK_MS = 100;

/**
 * Gathers the extensions that fall due within {@link BATCH_WINDOW_MS} into batches of one write
 * concern and `timeout` ({@link LeaseBatch}): an extension is asked for when it is due (its keeper's
 * half lease) and never sent earlier, so a document is written no more often than singly. A lock
 * whose time left (before its keeper's margin) would not outlast four windows, two batches and some
 * slack is urgent: sent at once in a batch of the urgent ones while fewer than
 * {@link MAX_URGENT_IN_FLIGHT} batches are in flight. The others go at the window's end while fewer
 * than {@link MAX_IN_FLIGHT} are, split at {@link BATCH_CAP}, nearest expiry first.
 *
 * Past what the server serves, what waits is sent as batches end, and one whose time runs out
 * before it is sent is left out (its keeper reports it lost by its own signal). Urgent locks go
 * oldest first (by acquisition), not nearest expiry first: nearest expiry first would make every
 * lock late together and lose them all, while a fixed order keeps as many as the server serves,
 * the same ones each round, and loses the newest.
 */
export class LeaseScheduler {
  private pending: Queued[] = [];
  private tick: NodeJS.Timeout | undefined;
  private soon: NodeJS.Immediate | undefined;
  private inFlight = 0;
  /** Some extension waited for batches in flight at the last flush: the next batch to end flushes again. */
  private congested = false;

  constructor(
    private readonly engine: LockEngine,
    private readonly batch: LeaseBatch,
    private readonly call: ResolvedCallOptions,
  ) {}

  /** Extends `member` in a batch; resolves undefined when it was not sent (withdrawn, or too late). */
  extend(member: BatchMember): Promise<BatchExtension | undefined> {
    return new Promise((resolve, reject) => {
      if (member.signal?.aborted) return resolve(undefined);
      const onAbort = (): void => this.withdraw(queued);
      const settled = (): void => member.signal?.removeEventListener('abort', onAbort);
      const queued: Queued = {
        ...member,
        resolve: (extension) => (settled(), resolve(extension)),
        reject: (error) => (settled(), reject(error)),
      };
      member.signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.push(queued);
      // An urgent lock waits for no window, only for those due in the same turn (keepers' timers that fire together).
      if (this.left(queued) < this.urgentMs()) this.soon ??= setImmediate(() => this.flush());
      else this.tick ??= setTimeout(() => this.flush(), BATCH_WINDOW_MS);
    });
  }

  /** ms left of `queued`'s lease before its keeper gives up (by the upper bound of the server's clock). */
  private left(queued: Queued): number {
    return this.engine.clock.remaining(queued.lock.expiresAt) - queued.marginMs;
  }

  /**
   * Below this time left, a lock is not made to wait for a window, nor for batches in flight: four
   * windows (a window is then at most a quarter of what it has left), twice what a batch takes, and
   * some slack. A 2 s lease has about 900 ms left when it is due; a lease of 600 ms or less is
   * never delayed.
   */
  private urgentMs(): number {
    return 4 * BATCH_WINDOW_MS + 2 * this.batch.expectedMs() + URGENT_SLACK_MS;
  }

  /** Sends what is urgent, oldest lock first, then the rest, nearest expiry first, as far as batches in flight allow. */
  private flush(): void {
    clearTimeout(this.tick);
    clearImmediate(this.soon);
    this.tick = undefined;
    this.soon = undefined;
    const urgentMs = this.urgentMs();
    const byLeft = this.pending.map((queued) => ({ queued, left: this.left(queued) })).sort((a, b) => a.left - b.left);
    for (const { queued, left } of byLeft) if (left <= 0) queued.resolve(undefined);
    const live = byLeft.filter(({ left }) => left > 0);
    const urgent = live.filter(({ left }) => left < urgentMs).map(({ queued }) => queued).sort(oldestFirst);
    const rest = live.filter(({ left }) => left >= urgentMs).map(({ queued }) => queued);
    while (urgent.length > 0 && this.inFlight < MAX_URGENT_IN_FLIGHT) this.launch(urgent.splice(0, BATCH_CAP));
    while (rest.length > 0 && this.inFlight < MAX_IN_FLIGHT) this.launch(rest.splice(0, BATCH_CAP));
    this.pending = [...urgent, ...rest];
    // Urgent extensions wait, some came too late, or the most pressed has less than two batches' time left (so a lease of a few hundred ms extended on time does not hold attempts back for good): the keepers are behind, and new acquisitions would take the server from them.
    const tight = (live[0]?.left ?? Infinity) < 2 * this.batch.expectedMs();
    if (urgent.length > 0 || tight || live.length < byLeft.length) this.engine.store.keepersBehind(BEHIND_MS);
    this.congested = this.pending.length > 0;
    // What waits becomes urgent in time, and is looked at again; a batch that ends sends it sooner.
    if (this.congested) this.tick = setTimeout(() => this.flush(), BATCH_WINDOW_MS);
  }

  private launch(members: Queued[]): void {
    this.inFlight++;
    void this.batch.send(members, this.call).then(() => {
      this.inFlight--;
      if (this.congested) this.flush();
    });
  }

  /** Takes `queued` out if it is not sent yet (its keeper stopped). */
  private withdraw(queued: Queued): void {
    const at = this.pending.indexOf(queued);
    if (at < 0) return;
    this.pending.splice(at, 1);
    queued.resolve(undefined);
  }
}

/** Older locks first (by acquisition time, then id): a fixed order, the same in every round. */
function oldestFirst(a: Queued, b: Queued): number {
  return a.lock.timestamp - b.lock.timestamp || (a.lock.id < b.lock.id ? -1 : a.lock.id > b.lock.id ? 1 : 0);
}

/** The schedulers of one lock object's extensions, one per write concern, `timeout` and `boom` (the errors a batch reports are made with it). */
export class LeaseBatches {
  private readonly schedulers = new Map<unknown, Map<string, LeaseScheduler>>();

  constructor(private readonly engine: LockEngine) {}

  /** Extends `member` in a batch of extensions sent with `call`'s write concern and timeout. */
  extend(member: BatchMember, call: ResolvedCallOptions): Promise<BatchExtension | undefined> {
    const byBoom = this.schedulers.get(call.boom) ?? new Map<string, LeaseScheduler>();
    this.schedulers.set(call.boom, byBoom);
    const key = `${String(call.w)} ${call.timeout}`;
    let scheduler = byBoom.get(key);
    if (!scheduler) {
      scheduler = new LeaseScheduler(this.engine, new LeaseBatch(this.engine), call);
      byBoom.set(key, scheduler);
    }
    return scheduler.extend(member);
  }
}
