import type { ClientSession } from 'mongodb';
import { isLockError } from '../common/errors';
import type { LockData } from '../protocol/lock-data';
import type { Proof } from '../protocol/proofs';

/** How `using()` ends its lock once the body is done. */
export type HoldEnd =
  /** Released now: no transaction that is still open wrote it. */
  | 'release'
  /** Nothing to send: released (or committed) in the caller's transaction, monglock releases it after that transaction. */
  | 'released'
  /** Released in the background once the open transaction that wrote it (an extension) ends. */
  | 'after-transaction';

/** What the caller's transactions wrote of a kept lock. */
interface Written {
  readonly timestamp: number;
  session?: ClientSession;
  released: boolean;
}

/**
 * The caller's transactions that wrote the locks `using()` (or `usingAll()`) keeps, by lock id: a release, commit or
 * extension with `session`, whichever way it came (the handle, or the lock's `release`/`extend`
 * with the handle or its JSON). MongoDB holds a write outside a transaction to a document the open
 * transaction wrote until the transaction ends; a `using()` run inside it ends first, so its own
 * release must not be sent then and waited for. One instance per lock (`DocumentLock`).
 */
export class TransactionWrites {
  readonly #kept = new Map<string, Written>();

  /** Runs `hold` (a `using()`) while `lock` is kept, with how its hold ends (see {@link HoldEnd}). */
  async keeping<T>(lock: LockData, hold: (ending: () => HoldEnd) => Promise<T>): Promise<T> {
    const kept = this.keep(lock);
    try {
      return await hold(kept.ending);
    } finally {
      kept.done();
    }
  }

  /** Keeps `lock` until `done()`: `ending()` says how its hold ends (see {@link HoldEnd}). */
  keep(lock: LockData): { readonly ending: () => HoldEnd; readonly done: () => void } {
    this.#kept.set(lock.id, { timestamp: lock.timestamp, released: false });
    return { ending: () => this.#endOf(lock.id), done: () => this.#kept.delete(lock.id) };
  }

  /** A write of the lock `proof` names is sent in the transaction of `call.session` (a v2 timestamp: every kept lock of that ms). */
  wrote(proof: Proof, call: { readonly session?: ClientSession }): void {
    for (const written of this.#named(proof)) written.session = call.session;
  }

  /**
   * The release of the lock `proof` names resolved in the caller's transaction: `releaseAfter`, the
   * same release outside it, is sent in the background ({@link releaseAfterTransaction}), and the
   * kept lock is left to it (a v2 timestamp may name another lock: only an id counts).
   */
  released(proof: Proof, releaseAfter: () => Promise<void>, timeoutMs: number): void {
    const written = 'id' in proof ? this.#kept.get(proof.id) : undefined;
    if (written) written.released = true;
    void releaseAfterTransaction(releaseAfter, timeoutMs);
  }

  #endOf(id: string): HoldEnd {
    const written = this.#kept.get(id);
    if (written?.released) return 'released';
    return written?.session?.inTransaction() === true ? 'after-transaction' : 'release';
  }

  #named(proof: Proof): Written[] {
    if ('id' in proof) return [this.#kept.get(proof.id)].filter((written) => written !== undefined);
    return [...this.#kept.values()].filter((written) => written.timestamp === proof.timestamp);
  }
}

/**
 * Ends a kept lock (of `using()`, or a member of `usingAll()`) as `end` says: `release()` now, nothing
 * (released in the caller's transaction), or `release()` in the background after that transaction.
 */
export async function endHold(end: HoldEnd, release: () => Promise<void>, timeoutMs: number): Promise<void> {
  if (end === 'release') await release();
  else if (end === 'after-transaction') void releaseAfterTransaction(release, timeoutMs);
}

/** How often, and how long apart at the least (ms), the release that follows a transaction is tried while that transaction runs. */
const AFTER_TRANSACTION_TRIES = 6;

/**
 * After a write of a lock in the caller's transaction (a release, a commit, an extension kept by
 * `using()`): the release outside it, in the background. MongoDB holds it until the transaction
 * ends (a write outside a transaction waits for the one that holds the document): it releases the
 * lock whatever the transaction's outcome, or finds nothing after a commit that released it. It is
 * tried again while its `maxTimeMS` runs out before the transaction ends (60 s by default).
 */
async function releaseAfterTransaction(release: () => Promise<void>, timeoutMs: number): Promise<void> {
  for (let tried = 1; ; tried++) {
    try {
      await release();
      return;
    } catch (error) {
      if (!isLockError(error, 'DbError') || tried === AFTER_TRANSACTION_TRIES) return; // not held: the transaction took it out
      await new Promise((resolve) => setTimeout(resolve, Math.min(timeoutMs, 1_000)));
    }
  }
}
