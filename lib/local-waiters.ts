/**
 * The acquisitions of this process that wait for a document, so that a release in this process
 * hands the document over at once instead of after a polling delay. A wake-up is only a hint: the
 * woken waiter tries again, and the server decides.
 */
export class LocalWaiters {
  private readonly byDocument = new Map<string, Set<Waiter>>();

  /**
   * Joins the waiters of document `id`. `rank` orders them (lowest woken first): the time since
   * they came, or in fair mode their ticket. Returns the waiter: `sleep(ms, signal)` resolves
   * after `ms` or when woken; `leave()` when done.
   */
  join(id: unknown, rank: () => readonly [number, string]): Waiter {
    const key = keyOf(id);
    let waiters = this.byDocument.get(key);
    if (!waiters) this.byDocument.set(key, (waiters = new Set()));
    const waiter = new Waiter(rank, () => {
      waiters.delete(waiter);
      if (waiters.size === 0 && this.byDocument.get(key) === waiters) this.byDocument.delete(key);
    });
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

/** One waiting acquisition. */
export class Waiter {
  private wakeUp: (() => void) | undefined;
  private woken = false;

  constructor(
    private readonly rank: () => readonly [number, string],
    readonly leave: () => void,
  ) {}

  /** Resolves after `ms`, or as soon as a local release wakes it; rejects when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
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
