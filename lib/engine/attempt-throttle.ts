import type { CommandPriority } from '../common/options';

/** Attempts and reads a client sends at once while its lease keepers are behind ({@link AttemptThrottle.keepersBehind}). */
export const ATTEMPTS_WHILE_BEHIND = 4;
/** Once the keepers caught up, attempts in flight may grow by one each this many ms (75 in about 2 s): not all back at once. */
const RAMP_MS_PER_ATTEMPT = 25;

/**
 * Admission control of a client's acquisition attempts and reads (lib/engine/command-gate.ts).
 * Past what the server serves, new acquisitions take the server's time from the leases already
 * held, and every lease is lost together. So while the client's lease keepers are behind (their
 * extensions wait, came too late, or take a large part of what a lease has left:
 * lib/engine/lease-scheduler.ts), at most {@link ATTEMPTS_WHILE_BEHIND} attempts and reads are in
 * flight; once they caught up, one more each {@link RAMP_MS_PER_ATTEMPT} ms. Releases and
 * extensions are never held back here. Below it, the gate's cap still applies.
 */
export class AttemptThrottle {
  #inFlight = 0;
  /** Until when (`performance.now()`) the keepers are behind. */
  #behindUntil = 0;
  #timer: NodeJS.Timeout | undefined;

  /** @param room called when more attempts may be in flight than before (the hold ended, or the ramp grew). */
  constructor(private readonly room: () => void) {}

  /** True when one more attempt may be sent now. */
  allows(): boolean {
    const since = performance.now() - this.#behindUntil;
    return this.#inFlight < ATTEMPTS_WHILE_BEHIND + Math.max(0, since / RAMP_MS_PER_ATTEMPT);
  }

  started(): void {
    this.#inFlight++;
  }

  ended(): void {
    this.#inFlight--;
  }

  /** The keepers are behind: attempts are held back for `forMs` from now, then let in as the ramp allows. */
  keepersBehind(forMs: number): void {
    this.#behindUntil = Math.max(this.#behindUntil, performance.now() + forMs);
    this.#wake(this.#behindUntil - performance.now());
  }

  /** Attempts still wait while slots are free: look again when the ramp has grown by one. */
  rampOn(): void {
    this.#wake(RAMP_MS_PER_ATTEMPT);
  }

  #wake(afterMs: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.room(), afterMs);
    this.#timer.unref();
  }
}

/**
 * Cleanups in flight at once (releases of locks nobody relies on any more): never held back by the
 * throttle, but a burst of them (thousands of leases lost together) does not take the server from
 * the extensions of the leases still held.
 */
export const CLEANUPS_IN_FLIGHT = 8;

/** The caps a client's gate puts on classes of commands in flight, below its own: attempts ({@link AttemptThrottle}) and cleanups ({@link CLEANUPS_IN_FLIGHT}). */
export class ClassCaps {
  readonly attempts: AttemptThrottle;
  #cleanups = 0;

  /** @param room called when more attempts may be in flight than before. */
  constructor(room: () => void) {
    this.attempts = new AttemptThrottle(room);
  }

  /** True when one more command of `priority` may be in flight. */
  allows(priority: CommandPriority): boolean {
    if (priority === 'attempt') return this.attempts.allows();
    return priority !== 'cleanup' || this.#cleanups < CLEANUPS_IN_FLIGHT;
  }

  started(priority: CommandPriority): void {
    if (priority === 'attempt') this.attempts.started();
    else if (priority === 'cleanup') this.#cleanups++;
  }

  ended(priority: CommandPriority): void {
    if (priority === 'attempt') this.attempts.ended();
    else if (priority === 'cleanup') this.#cleanups--;
  }
}
