/** A database call that outlived its `timeout`: the client-side deadline fired first. */
export class DeadlineExceededError extends Error {
  override readonly name = 'DeadlineExceededError';

  constructor(operation: string, ms: number, why = '') {
    super(`${operation} did not settle within ${ms} ms${why}`);
  }
}

/**
 * A lock command whose deadline passed while it waited for one of its client's command slots
 * (lib/engine/command-gate.ts): it was never handed to the driver, so it cannot have landed.
 */
export class UnsentCommandError extends DeadlineExceededError {
  /** Never sent: nothing it would have written can land. */
  readonly sent = false;

  constructor(operation: string, ms: number) {
    super(operation, ms, ' (it waited for a slot among its client\'s lock commands in flight, and was never sent)');
  }
}

/**
 * An acquisition attempt whose call was abandoned (its signal aborted, a promise library's cancel)
 * while it waited for one of its client's command slots: it is not sent, so it cannot have landed.
 * (A `wait` that runs out abandons no attempt: the wait ends after the attempt in flight.)
 */
export class AbandonedAttemptError extends Error {
  override readonly name = 'AbandonedAttemptError';
  /** Never sent: nothing it would have written can land. */
  readonly sent = false;

  constructor() {
    super('the call was abandoned while its attempt waited for a slot among its client\'s lock commands: it was never sent');
  }
}

/** The most deadlines expired in one turn of the event loop. */
const EXPIRED_PER_TURN = 256;

/** A deadline being watched: when it passes, and what to do then. */
export interface Watched {
  readonly endsAt: number;
  readonly expire: () => void;
}

/**
 * One timer for every deadline watched, instead of one per command: it fires at the earliest
 * deadline, expires the entries whose deadline passed, and waits for the next one. Commands
 * usually share one `timeout`, so a new deadline is rarely earlier than the armed one.
 */
class DeadlineWatch {
  private readonly watched = new Set<Watched>();
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;

  add(entry: Watched): void {
    this.watched.add(entry);
    if (entry.endsAt < this.armedFor) this.arm(entry.endsAt);
  }

  delete(entry: Watched): void {
    this.watched.delete(entry);
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.armedFor = at;
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - performance.now()));
    this.timer.unref(); // a command in flight keeps its own socket, and so the process, alive
  }

  /**
   * Expires the entries whose deadline passed, at most {@link EXPIRED_PER_TURN} in one turn of the
   * event loop: thousands of calls that time out together (a spike's waiters) fail in slices, and
   * the timers and replies between them (lease keepers, batches) are not held up behind them.
   */
  private fire(): void {
    this.armedFor = Infinity;
    const now = performance.now();
    let next = Infinity;
    let expired = 0;
    for (const entry of this.watched) {
      if (entry.endsAt > now) next = Math.min(next, entry.endsAt);
      else if (expired === EXPIRED_PER_TURN) next = now;
      else {
        this.watched.delete(entry);
        expired++;
        entry.expire();
      }
    }
    if (next < Infinity) this.arm(next);
  }
}

const failing: Array<() => void> = [];
let failTurn: NodeJS.Immediate | undefined;

/**
 * Runs `fail` soon, at most {@link EXPIRED_PER_TURN} such per turn of the event loop: thousands
 * of queued commands found past their deadline together would otherwise fail in one synchronous
 * loop (each rejecting a caller), and hold up the lease keepers' timers and replies behind them.
 */
export function failInSlices(fail: () => void): void {
  failing.push(fail);
  failTurn ??= setImmediate(failSome);
}

function failSome(): void {
  failTurn = undefined;
  for (const fail of failing.splice(0, EXPIRED_PER_TURN)) fail();
  if (failing.length > 0) failTurn = setImmediate(failSome);
}

/** The deadlines of every command in flight or queued, on one timer. */
export const deadlines = new DeadlineWatch();

/**
 * Runs `operation` and settles within `ms` of `startedAt` (`performance.now()` ms; default: now):
 * the driver's promise keeps running if the deadline passes first, but its late outcome is
 * observed (no unhandled rejection) and dropped.
 */
export function withDeadline<T>(name: string, ms: number, operation: () => Promise<T>, startedAt = performance.now()): Promise<T> {
  const pending = operation();
  return new Promise<T>((resolve, reject) => {
    const entry: Watched = { endsAt: startedAt + ms, expire: () => reject(new DeadlineExceededError(name, ms)) };
    deadlines.add(entry);
    pending.then(
      (value) => {
        deadlines.delete(entry);
        resolve(value);
      },
      (error: unknown) => {
        deadlines.delete(entry);
        reject(error);
      },
    );
  });
}
