import { publish, type LeaseLossCause } from '../common/diagnostics';
import { isLockError, lockError, type BoomLike } from '../common/errors';
import { Handle } from './lock-handle';

/** What a lease keeper needs of a held lock. */
export interface KeptLease {
  /** ms of the lease this client can rely on (by the upper bound of the server's clock). */
  remaining(): number;
  /** Pushes the lease forward; rejects when the lock is lost or MongoDB fails. */
  extend(): PromiseLike<unknown>;
  /** The lease kept now, in ms, when it can change while kept (a conversion gives the lock its new tag's); default: the keeper's. */
  leaseMs?(): number;
  /** Releases the lock (`maxHold` passed). */
  release(): PromiseLike<unknown>;
  /** The error that tells the body why the lock ended without its release. */
  ended(cause: LeaseLossCause, error: unknown): Error;
  /** Names the lock in events. */
  readonly identity: { readonly namespace: string; readonly tag: string; readonly lockId: string };
  /** True once the holder let the lock go (released it in its transaction): nothing is left to keep. */
  letGo?(): boolean;
  /** Takes back an extension asked for but not yet sent (one waiting for its batch): it settles at once. */
  withdraw?(): void;
  /** The keeper stopped relying on the lock before its lease ended by what it knows (no extension in time): its release is a cleanup. */
  lapsed?(): void;
}

/**
 * Default `maxHold` of `using()` and the hapi plugin: 10 minutes. Automatic renewal is what lets
 * a body outlive its lease; a body that hangs (an awaited promise that never settles) would renew
 * forever and keep everyone else out. Ten minutes is far longer than a request or an ordinary
 * critical section, and short enough that a hung holder frees the resource within minutes. Pass
 * `maxHold: Infinity` for a body that must hold longer.
 */
export const DEFAULT_MAX_HOLD = 10 * 60_000;

/**
 * How long before the lease may end (by the upper bound of the server's clock) the keeper
 * aborts the body's signal: 5 % of the lease, at most 250 ms, so that a timer that fires a
 * little late (a busy event loop) still aborts before another client can take the lock.
 */
export function safetyMargin(leaseMs: number): number {
  return Math.min(250, Math.ceil(leaseMs / 20));
}


/**
 * Keeps a lease alive while a `using()` body or a hapi route runs: extends it each time half of
 * `leaseMs` is left, and aborts `controller` with the reason once the lock is lost:
 * - MongoDB refused an extension (`refused`: released, expired and retaken, document gone);
 * - less than the {@link safetyMargin} is left by the upper bound of the server's clock, after
 *   extensions failed with DbError (`store-outage`: they are retried until then, because a store
 *   that cannot be reached has not taken the lock away) or before one could land (`expired`);
 * - `maxHoldMs` passed since it started (`max-hold`): it stops renewing and releases the lock.
 * Time left is judged again whenever the lease's end changes (`replan()`). Failures and losses
 * are published on `monglock:extension-failed` and `monglock:lease-lost`. Once the holder let the
 * lock go (`letGo`), it stops without either. `stop()` clears every timer and waits for an
 * extension in flight.
 */
export class LeaseKeeper {
  private extendTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private readonly maxHoldTimer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  /** The last extension's DbError, while MongoDB cannot be reached. */
  private outage: unknown;
  private stopped = false;

  constructor(
    private readonly lease: KeptLease,
    private readonly leaseMs: number,
    private readonly controller: AbortController,
    maxHoldMs = DEFAULT_MAX_HOLD,
    /** How long the lock was already held when this keeper took over (a keeper started later counts from the acquisition). */
    heldMs = 0,
  ) {
    if (Number.isFinite(maxHoldMs)) this.maxHoldTimer = setTimeout(() => this.giveUp(maxHoldMs), Math.max(0, maxHoldMs - heldMs));
    this.replan();
  }

  /** Stops extending; resolves once no timer and no extension is left. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clearTimers();
    clearTimeout(this.maxHoldTimer);
    this.lease.withdraw?.();
    await this.inFlight;
  }

  /** Plans the next extension and the abort from the time left now. */
  replan(): void {
    this.clearTimers();
    if (this.stopped || this.controller.signal.aborted) return;
    const left = this.lease.remaining();
    if (left <= this.margin) return this.lapse();
    this.extendTimer = setTimeout(() => this.extend(), Math.max(0, left - this.kept / 2));
    this.expiryTimer = setTimeout(() => this.lapse(), left - this.margin);
  }

  /** The lease kept now, in ms: the lock's own once it says (a converted lock's), else the one given. */
  private get kept(): number {
    return this.lease.leaseMs?.() ?? this.leaseMs;
  }

  /** How long before the lease may end the body is told: {@link safetyMargin} of the lease kept now. */
  private get margin(): number {
    return safetyMargin(this.kept);
  }

  private extend(): void {
    if (this.inFlight || this.stoppedByHolder()) return;
    const before = this.lease.remaining();
    this.inFlight = Promise.resolve(this.lease.extend()).then(
      () => {
        this.inFlight = undefined;
        // An extension not sent (its lease too near its end by then) extended nothing: an outage seen before still stands.
        if (this.lease.remaining() > before) this.outage = undefined;
        this.replan();
      },
      (error: unknown) => {
        this.inFlight = undefined;
        // Only a DbError is a store outage; a refusal (or any other failure) ends the hold now.
        const storeOutage = isLockError(error, 'DbError');
        const remainingMs = this.lease.remaining();
        publish.extensionFailed(() => ({ ...this.lease.identity, storeOutage, remainingMs, error }));
        if (!storeOutage) return this.lose('refused', error);
        // MongoDB could not be reached: the lock is not lost while the lease lasts. Try again
        // (the expiry timer still stands), a few times before the margin.
        this.outage = error;
        if (this.stopped || this.controller.signal.aborted) return;
        clearTimeout(this.extendTimer);
        this.extendTimer = setTimeout(() => this.extend(), Math.min(1_000, Math.max(20, (remainingMs - this.margin) / 4)));
      },
    );
  }

  /** Too little of the lease is left to rely on. */
  private lapse(): void {
    if (this.outage !== undefined) this.lose('store-outage', this.outage);
    else this.lose('expired', undefined);
  }

  /** `maxHold` passed: stop renewing, tell the body, release. */
  private giveUp(maxHoldMs: number): void {
    if (this.stopped || this.controller.signal.aborted || this.stoppedByHolder()) return;
    this.stopped = true;
    this.clearTimers();
    const reason = this.lease.ended('max-hold', maxHoldMs);
    publish.leaseLost(() => ({ ...this.lease.identity, cause: 'max-hold', error: reason }));
    this.controller.abort(reason);
    this.lease.withdraw?.();
    void Promise.resolve(this.inFlight)
      .then(() => this.lease.release())
      .then(undefined, () => undefined);
  }

  private lose(cause: LeaseLossCause, error: unknown): void {
    if (this.stoppedByHolder()) return;
    this.clearTimers();
    clearTimeout(this.maxHoldTimer);
    if (this.stopped || this.controller.signal.aborted) return;
    const reason = cause === 'refused' ? error : this.lease.ended(cause, error);
    if (cause !== 'refused') this.lease.lapsed?.();
    publish.leaseLost(() => ({ ...this.lease.identity, cause, error: reason }));
    this.controller.abort(reason);
  }

  /** True when the holder let the lock go (`lease.letGo`); then it stops: no extension, loss or release of its own. */
  private stoppedByHolder(): boolean {
    if (!this.lease.letGo?.()) return false;
    this.stopped = true;
    this.clearTimers();
    clearTimeout(this.maxHoldTimer);
    return true;
  }

  private clearTimers(): void {
    clearTimeout(this.extendTimer);
    clearTimeout(this.expiryTimer);
  }
}

/**
 * How a keeper keeps `handle`: extended to `leaseMs` with `params`, released with them at `maxHold`.
 * Once a conversion gives the lock another tag and token, it is extended to the lease the
 * conversion gave it (the new tag's, or the conversion's `locktimeout`), not to `leaseMs`.
 */
export function keptLease(handle: Handle, leaseMs: number, boom: BoomLike | undefined, params: object = {}): KeptLease {
  const keyOf = (): string => `${handle.tag} ${handle.fence}`;
  let kept = { key: keyOf(), leaseMs };
  const current = (): number => {
    if (kept.key !== keyOf()) kept = { key: keyOf(), leaseMs: Handle.lease(handle) };
    return kept.leaseMs;
  };
  let withdrawal = new AbortController();
  return {
    remaining: () => handle.remaining(),
    // The lease is asked for when the extension is sent: one that follows a conversion is sent with the new tag's.
    // A plain extension goes in a batch with the others due about then (where the lock allows it).
    extend: () => Handle.keep(handle, current, params, { marginMs: safetyMargin(current()), signal: withdrawal.signal }),
    withdraw: () => {
      withdrawal.abort();
      withdrawal = new AbortController();
    },
    leaseMs: current,
    release: () => handle.release(params),
    lapsed: () => Handle.lapse(handle),
    ended: (cause, error) => leaseEnded(cause, error, boom),
    identity: { namespace: handle.namespace, tag: handle.tag, lockId: handle.id },
  };
}

/** The abort reason of a lease that ended without its holder's release. */
export function leaseEnded(cause: LeaseLossCause, error: unknown, boom: BoomLike | undefined): Error {
  switch (cause) {
    case 'max-hold':
      return lockError('MaxHoldExceeded', boom, { detail: `held for maxHold (${String(error)} ms): renewal stopped and the lock was released` });
    case 'store-outage':
      return lockError('DbError', boom, {
        cause: error,
        detail: 'store outage: MongoDB could not be reached to extend the lease until it ran out by the server clock, so another client may take the lock now',
      });
    case 'refused':
      return error instanceof Error ? error : lockError('LockNotFound', boom, { detail: 'an extension was refused' });
    case 'expired':
      return lockError('LockNotFound', boom, { detail: 'the lease ended before it could be extended' });
  }
}
