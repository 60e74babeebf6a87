/** What a lease keeper needs of a held lock. */
export interface KeptLease {
  /** ms of the lease this client can rely on (by the upper bound of the server's clock). */
  remaining(): number;
  /** Pushes the lease forward; rejects when the lock is lost or MongoDB fails. */
  extend(): PromiseLike<unknown>;
  /** The error that tells the body its lease ended before an extension could land. */
  expired(): Error;
}

/**
 * How long before the lease may end (by the upper bound of the server's clock) the keeper
 * aborts the body's signal: 5 % of the lease, at most 250 ms, so that a timer that fires a
 * little late (a busy event loop) still aborts before another client can take the lock.
 */
export function safetyMargin(leaseMs: number): number {
  return Math.min(250, Math.ceil(leaseMs / 20));
}

/**
 * Keeps a lease alive while a `using()` body runs: extends it each time half of `leaseMs` is
 * left, and aborts `controller` with the reason as soon as an extension fails or less than the
 * {@link safetyMargin} is left first. Time left is judged by the upper bound of the server's
 * clock, so the signal never aborts after the server could have given the lock to another
 * client; and it is judged again whenever the lease's end changes (`replan()`: the body extended
 * its own handle, a group was renewed). `stop()` clears every timer and waits for an extension
 * in flight.
 */
export class LeaseKeeper {
  private extendTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private stopped = false;
  private readonly margin: number;

  constructor(
    private readonly lease: KeptLease,
    private readonly leaseMs: number,
    private readonly controller: AbortController,
  ) {
    this.margin = safetyMargin(leaseMs);
    this.replan();
  }

  /** Stops extending; resolves once no timer and no extension is left. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clearTimers();
    await this.inFlight;
  }

  /** Plans the next extension and the abort from the time left now. */
  replan(): void {
    this.clearTimers();
    if (this.stopped || this.controller.signal.aborted) return;
    const left = this.lease.remaining();
    if (left <= this.margin) return this.lose(this.lease.expired());
    this.extendTimer = setTimeout(() => this.extend(), Math.max(0, left - this.leaseMs / 2));
    this.expiryTimer = setTimeout(() => this.lose(this.lease.expired()), left - this.margin);
  }

  private extend(): void {
    if (this.inFlight) return;
    this.inFlight = Promise.resolve(this.lease.extend()).then(
      () => {
        this.inFlight = undefined;
        this.replan();
      },
      (error: unknown) => {
        this.inFlight = undefined;
        this.lose(error);
      },
    );
  }

  private lose(reason: unknown): void {
    this.clearTimers();
    if (!this.stopped && !this.controller.signal.aborted) this.controller.abort(reason);
  }

  private clearTimers(): void {
    clearTimeout(this.extendTimer);
    clearTimeout(this.expiryTimer);
  }
}
