/**
 * The bookkeeping of one acquisition call, which may take several attempts (waiting, assertive
 * continuations) and may be abandoned: its signal aborts, its `wait` runs out, a promise library
 * cancels it, or it fails. Every lock an attempt writes that the caller will not receive is
 * released, including one written by an attempt still in flight when the call was abandoned,
 * whose reply arrives later. So giving up never leaves a lock held.
 */
export class Acquisition<L> {
  #abandoned: { readonly reason: unknown } | undefined;

  /**
   * @param releaseQuietly releases a lock this call wrote (failures ignored: the lease ends it).
   * @param mayHaveWritten the lock a failed attempt may have written (its reply was lost), if any.
   */
  constructor(
    private readonly releaseQuietly: (lock: L) => Promise<void>,
    private readonly mayHaveWritten: (error: unknown) => L | undefined = () => undefined,
  ) {}

  /** True once the call was abandoned. */
  get abandoned(): boolean {
    return this.#abandoned !== undefined;
  }

  /**
   * Runs one attempt. `wrote` names the lock its outcome holds that this call wrote (undefined
   * for none, or for a lock the caller already owned). If the call was abandoned by the time the
   * attempt settles, that lock is released and the attempt rejects with the abandonment's reason.
   * A lock a failed attempt may have written is released in any case: the caller does not hold it.
   */
  async attempt<T>(run: () => Promise<T>, wrote: (outcome: T) => L | undefined): Promise<T> {
    let outcome: T;
    try {
      outcome = await run();
    } catch (error) {
      const maybe = this.mayHaveWritten(error);
      if (maybe !== undefined) void this.releaseQuietly(maybe);
      throw error;
    }
    if (this.#abandoned) {
      const lock = wrote(outcome);
      if (lock !== undefined) await this.releaseQuietly(lock);
      throw this.#abandoned.reason;
    }
    return outcome;
  }

  /** Abandons the call with `reason`: releases `locks` now, and whatever attempts in flight write when they settle. */
  abandon(reason: unknown, ...locks: Array<L | undefined>): Promise<void> {
    this.#abandoned ??= { reason };
    return Promise.all(locks.map((lock) => (lock === undefined ? undefined : this.releaseQuietly(lock)))).then(() => undefined);
  }
}
