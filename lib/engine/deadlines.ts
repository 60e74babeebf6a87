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

  private fire(): void {
    this.armedFor = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const entry of this.watched) {
      if (entry.endsAt <= now) {
        this.watched.delete(entry);
        entry.expire();
      } else if (entry.endsAt < next) next = entry.endsAt;
    }
    if (next < Infinity) this.arm(next);
  }
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
