/**
 * The acquisitions of this process that wait for a document, so that a release in this process
 * hands the document over at once instead of after a polling delay. A wake-up is only a hint: the
 * woken waiter tries again, and the server decides.
 */
export class LocalWaiters {
  private readonly byDocument = new Map<string, Set<Waiter>>();
  /** Locks held in this process, by document: their release will wake a waiter. */
  private readonly held = new Map<string, number>();

  /** True while a lock on document `id` is held in this process (a refusal there is a conflict). */
  heldHere(id: unknown): boolean {
    return this.held.has(keyOf(id));
  }

  /** How many acquisitions of this process wait for document `id`. */
  queued(id: unknown): number {
    return this.byDocument.get(keyOf(id))?.size ?? 0;
  }

  /** A lock on document `id` was won in this process. */
  acquired(id: unknown): void {
    const key = keyOf(id);
    this.held.set(key, (this.held.get(key) ?? 0) + 1);
  }

  /** A lock on document `id` held in this process was let go (released, or found lost): wakes the waiter that ranks first. */
  released(id: unknown): void {
    const key = keyOf(id);
    const count = (this.held.get(key) ?? 0) - 1;
    if (count > 0) this.held.set(key, count);
    else this.held.delete(key);
    this.wake(id);
  }

  /**
   * Joins the waiters of document `id`. `rank` orders them (lowest woken first): the time since
   * they came, or in fair mode their ticket. Returns the waiter: `sleep(ms, signal)` resolves
   * after `ms` or when woken; `leave()` when done.
   */
  join(id: unknown, rank: () => readonly [number, string]): Waiter {
    const key = keyOf(id);
    let waiters = this.byDocument.get(key);
    if (!waiters) this.byDocument.set(key, (waiters = new Set()));
    const waiter = new Waiter(
      rank,
      () => {
        waiters.delete(waiter);
        if (waiters.size === 0 && this.byDocument.get(key) === waiters) this.byDocument.delete(key);
      },
      () => this.held.has(key),
    );
    waiters.add(waiter);
    return waiter;
  }

  /** A lock on document `id` was released: wakes the waiter that ranks first. */
  wake(id: unknown): void {
    const waiters = this.byDocument.get(keyOf(id));
    if (!waiters || waiters.size === 0) return;
    let first: Waiter | undefined;
    for (const waiter of waiters) if (!first || waiter.before(first)) first = waiter;
    first?.wake();
  }
}

/**
 * How long a waiter sleeps, at most, while its document is held in this process: that holder's
 * release wakes it, so polling would only add refused attempts (the lease, should the holder never
 * release, is checked this often).
 */
export const HELD_HERE_SLEEP = 1_000;

/** One waiting acquisition. */
export class Waiter {
  private wakeUp: (() => void) | undefined;
  private woken = false;

  constructor(
    private readonly rank: () => readonly [number, string],
    readonly leave: () => void,
    private readonly heldHere: () => boolean,
  ) {}

  /**
   * Resolves after `ms` (longer while the document is held in this process, whose release wakes
   * it, but never past `left`, what is left of the wait), or as soon as a local release wakes it;
   * rejects when `signal` aborts.
   */
  sleep(ms: number, signal?: AbortSignal, left = ms): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    if (this.heldHere()) ms = Math.min(left, Math.max(ms, HELD_HERE_SLEEP));
    return new Promise((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.wakeUp = undefined;
      };
      const onAbort = (): void => {
        done();
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        done();
        resolve();
      }, ms);
      this.wakeUp = () => {
        done();
        resolve();
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Wakes it now; a wake-up that comes while it is not asleep ends its next sleep at once. */
  wake(): void {
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

/** A map key for a document `_id` (a string, a number, an ObjectId...). */
function keyOf(id: unknown): string {
  return `${typeof id}:${String(id)}`;
}
