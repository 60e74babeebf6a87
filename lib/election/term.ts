import type { Document } from 'mongodb';
import { isLockError, lockError, withDbErrors, type BoomLike } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { PromiseOf } from '../common/promise-types';
import type { LockHandle } from '../locks/lock-handle';
import type { Store } from '../engine/store';
import type { LockPaths } from '../protocol/stored-format';
import { expectStorable } from './stored-value';
import { proclaimOperation } from '../protocol/leader';

/** A term of office: this caller leads its election until {@link Term.signal} aborts. `P` is the `Promise` option. */
export interface Term<V = unknown, P = undefined> {
  /** The term's fencing token: strictly greater than every earlier term's of this election. */
  readonly fence: number;
  /** What this leader proclaims (its campaign's `value`, then the last `proclaim`). */
  readonly value: V;
  /**
   * Aborts once this caller can no longer rely on leading: a renewal that failed in time, its
   * lock taken (seen at the next renewal, or through the change stream), a lease that may have
   * ended (a paused process), or {@link resign}. Its reason says which.
   */
  readonly signal: AbortSignal;
  /** Changes the value while leading (same term, same token); rejects `LockNotFound` (409) once the term ended. */
  proclaim(value: V): PromiseOf<P, void>;
  /** Ends the term in one write (the release), which wakes the next campaigner; resolves once it landed (at once when the term had already ended). */
  resign(): PromiseOf<P, void>;
  /** A filter on the election's document that matches only while this term holds: add it to a write that only the leader may make. */
  guard(extra?: Document): Document;
  /** ms of the lease left by the upper bound of the server's clock (≤ 0: the term may have ended). */
  remaining(): number;
}

/** What a term needs from its election. */
export interface TermSite {
  readonly store: Store;
  readonly paths: LockPaths;
  readonly call: ResolvedCallOptions;
  readonly boom: BoomLike | undefined;
  /** Runs a method's body in the election's promise library. */
  run<T>(body: () => Promise<T>): Promise<T>;
  /** Calls `changed` after each change the change stream reports for the election's document; returns the function that stops it. */
  watch(changed: () => void): () => void;
  /** The id of the live leader entry, read now (one read): undefined when nobody leads. */
  leaderId(): Promise<string | undefined>;
  /** ms between two looks after changes the stream reported while one was on its way. */
  readonly lookGapMs: number;
}

/** The class behind every {@link Term}: a `using()` hold of the election's lock whose body lasts until the term ends. */
export class ElectionTerm implements Term<unknown, unknown> {
  readonly #controller = new AbortController();
  readonly #handle: LockHandle;
  readonly #site: TermSite;
  #value: unknown;
  readonly #finished: Promise<void>;
  #finish: (outcome: Promise<void>) => void = () => undefined;
  readonly #unwatch: () => void;
  /** A look at the document (after a change the stream reported) is on its way, or one more is due after it. */
  #looking: 'idle' | 'looking' | 'again' = 'idle';
  /** Resolves when the term ends (resigned, or its signal aborted): the hold's body returns it. */
  readonly ended: Promise<void>;

  constructor(handle: LockHandle, holdSignal: AbortSignal, value: unknown, site: TermSite) {
    this.#handle = handle;
    this.#site = site;
    this.#value = value;
    this.ended = new Promise((resolve) => this.#controller.signal.addEventListener('abort', () => resolve(), { once: true }));
    this.#finished = new Promise((resolve) => (this.#finish = resolve));
    this.#finished.catch(() => undefined); // reported by resign(), if asked
    this.#unwatch = site.watch(() => this.#look());
    void this.ended.then(this.#unwatch);
    const lost = (): void => this.end(holdSignal.reason);
    if (holdSignal.aborted) lost();
    else holdSignal.addEventListener('abort', lost, { once: true });
  }

  get fence(): number {
    return this.#handle.fence;
  }

  get value(): unknown {
    return this.#value;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The hold ended (released, or failed to be): what resign resolves. A lost lock is no failure of resign: the term ended either way. */
  finished(outcome: Promise<unknown>): void {
    const settled = outcome.then(
      () => undefined,
      (error: unknown) => {
        if (isLockError(error, 'LockNotFound') || isLockError(error, 'LockWasReacquired') || isLockError(error, 'RessourceNotFound')) return;
        throw error;
      },
    );
    this.#finish(settled);
  }

  /** Ends the term with `reason` (its signal aborts; the hold's body returns, which releases). */
  end(reason: unknown): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }

  proclaim(value: unknown): Promise<void> {
    return this.#site.run(async () => {
      const stored = expectStorable('value', value);
      if (this.signal.aborted) throw this.#ended('the term ended before this proclaim');
      const { store, paths, call, boom } = this.#site;
      const landed = await withDbErrors(boom, () => store.applyOne(proclaimOperation(paths, this.guard(), this.#handle.id, stored), call));
      if (!landed) {
        const error = this.#ended('the term had ended when this proclaim reached the server (its lease ran out, or its lock was taken)');
        this.end(error);
        throw error;
      }
      this.#value = stored;
    });
  }

  resign(): Promise<void> {
    return this.#site.run(() => {
      this.end(lockError('LockNotFound', this.#site.boom, { detail: 'the term ended: resigned' }));
      return this.#finished;
    });
  }

  guard(extra?: Document): Document {
    return this.#handle.guard(extra);
  }

  remaining(): number {
    return this.#handle.remaining();
  }

  /**
   * The stream reported a change of the election's document: one read (one at a time; changes
   * meanwhile ask for one more) says whether this term's entry is still the live leader's. A
   * forced release or a successor is so seen before the next renewal; a failed read says nothing
   * (the renewals go on judging).
   */
  #look(): void {
    if (this.signal.aborted) return;
    if (this.#looking !== 'idle') {
      this.#looking = 'again';
      return;
    }
    this.#looking = 'looking';
    void this.#site.leaderId().then(
      (leader) => {
        if (leader !== undefined && leader !== this.#handle.id) this.end(this.#ended(`another campaigner leads now (seen through the change stream)`));
        else if (leader === undefined) this.end(this.#ended('this term\'s lock was released or taken (seen through the change stream)'));
      },
      () => undefined,
    ).finally(() => {
      const again = this.#looking === 'again';
      this.#looking = 'idle';
      // Changes that came meanwhile: one more look, a little later (a busy collection, whose events may not name their document, costs at most one read per gap).
      if (again) setTimeout(() => this.#look(), this.#site.lookGapMs).unref();
    });
  }

  #ended(detail: string): Error {
    return lockError('LockNotFound', this.#site.boom, { detail });
  }
}
