import type { Document } from 'mongodb';
import { isLockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { Acquired } from '../engine/acquired';
import { conversionLanded, conversionMayHaveLanded, convertLock, dropUpgrade, markUpgrade, type MaybeConverted } from '../engine/conversion';
import type { LockData } from '../protocol/lock-data';
import { retryWithin, type WaitParams } from '../waiting/wait-options';
import type { AcquireSite } from './document-acquire';

/** How long a pending upgrade's mark lives unless renewed, in ms: a crashed waiter's mark lapses by then. */
const MARK_LEASE = 2_000;
/** How old a mark may get before a waiting conversion renews it, in ms. */
const MARK_RENEWAL = 600;

/** What a conversion needs from the lock that made the handle. */
export type ConvertSite = Pick<AcquireSite, 'engine' | 'namespace' | 'clock' | 'waiters' | 'callOptions' | 'leaseOf'>;

export type { MaybeConverted } from '../engine/conversion';

/**
 * What a conversion made of its lock: moved to another tag (`lock`, with when the server wrote
 * it), and what a write whose reply was lost made of it if it landed (`maybe`).
 */
export type ConversionChange = { readonly lock: LockData; readonly appliedAt?: number; readonly maybe?: MaybeConverted } | { readonly maybe: MaybeConverted };

/**
 * What a conversion that rejected leaves its handle: what is known when it rejects (`now`), and
 * what an attempt still on its way then leaves once it has settled (`later`).
 */
export interface ConversionAftermath {
  readonly now: ConversionChange | undefined;
  readonly later: Promise<ConversionChange | undefined>;
}

/**
 * One `convert()` call's attempts. Refused by other holders, it tries again until `wait` passes,
 * marking a pending upgrade (renewed while it waits); a mark's failure does not end the wait (the
 * mark may be there: it is dropped when the call gives up). A conversion whose reply was lost is
 * tried again while waiting: the next attempt converts (then the lost one can no longer land: the
 * lock has left its old tag), or finds that it had landed. Every attempt is raced against the
 * signal: the call rejects with its reason at once, and what an attempt on its way lands
 * afterwards is undone (converted back; kept, and told to the handle, if that is refused).
 */
export class ConversionRun {
  /** The last attempt, settled or not (it records a conversion that landed after the caller gave up). */
  #inFlight: Promise<unknown> = Promise.resolve();
  #onItsWay = false;
  #abandoned = false;
  #landedLate: Acquired | undefined;
  #markSent = false;
  #markedAt: number | undefined;
  /** What an attempt whose reply was lost made of the lock if it landed. */
  #maybe: MaybeConverted | undefined;

  constructor(
    private readonly site: ConvertSite,
    private readonly target: Document,
    private readonly lock: LockData,
    private readonly to: string,
    private readonly lease: number,
    private readonly call: ResolvedCallOptions,
    private readonly waiting: WaitParams,
  ) {}

  /** Resolves the converted lock, or rejects: the last refusal once `wait` has passed, another error, or the signal's reason as soon as it aborts. */
  run(): Promise<Acquired> {
    const { engine } = this.site;
    const { signal, wait } = this.waiting;
    const retryable = (error: unknown): boolean => !signal?.aborted && (isLockError(error, engine.conflict) || (wait > 0 && conversionMayHaveLanded(error) !== undefined));
    return retryWithin(this.waiting, () => this.#raced(this.#attempt()), retryable, () => this.site.clock.local());
  }

  /**
   * Gives up, rejecting with `error`: what that leaves the handle (see {@link ConversionAftermath}),
   * at once. Neither the mark's removal nor an attempt still on its way is waited for: `later`
   * settles them (new readers are admitted again once the mark's removal lands; if it fails, the
   * mark lapses {@link MARK_LEASE} after it was written).
   */
  giveUp(error: unknown): ConversionAftermath {
    const found = conversionLanded(error);
    if (found) this.#moved(found);
    const now: ConversionChange | undefined = found ? { lock: found.lock, appliedAt: found.appliedAt } : this.#maybe && { maybe: this.#maybe };
    const later = this.#onItsWay ? this.#settle() : this.#markSent ? this.#dropMark().then(() => undefined) : Promise.resolve(undefined);
    return { now, later };
  }

  async #attempt(): Promise<Acquired> {
    const { engine } = this.site;
    if (this.waiting.signal?.aborted) throw this.waiting.signal.reason;
    try {
      return await convertLock(engine, this.target, this.lock, this.to, this.lease, this.call);
    } catch (error) {
      this.#maybe = conversionMayHaveLanded(error) ?? this.#maybe;
      const now = this.site.clock.local();
      const markDue = this.#markedAt === undefined || now - this.#markedAt >= MARK_RENEWAL;
      if (this.waiting.wait > 0 && !this.#abandoned && isLockError(error, engine.conflict) && markDue) await this.#mark(now);
      throw error;
    }
  }

  /** Marks (or renews) the pending upgrade; a `DbError` leaves the wait going (the mark may be there). */
  async #mark(now: number): Promise<void> {
    this.#markSent = true;
    try {
      if (await markUpgrade(this.site.engine, this.target, this.lock, this.to, MARK_LEASE, this.call)) this.#markedAt = now;
    } catch (error) {
      if (!isLockError(error, 'DbError')) throw error;
    }
  }

  /** `attempt`, or the signal's reason as soon as it aborts; a conversion the attempt lands afterwards is kept for {@link settle}. */
  #raced(attempt: Promise<Acquired>): Promise<Acquired> {
    const { signal } = this.waiting;
    this.#onItsWay = true;
    return new Promise((resolve, reject) => {
      let lost = false;
      const onAbort = (): void => {
        lost = true;
        this.#abandoned = true;
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#inFlight = attempt.then(
        (converted) => {
          this.#onItsWay = false;
          signal?.removeEventListener('abort', onAbort);
          if (lost) this.#landedLate = converted;
          else resolve(converted);
        },
        (error: unknown) => {
          this.#onItsWay = false;
          signal?.removeEventListener('abort', onAbort);
          if (!lost) reject(error);
        },
      );
    });
  }

  /** Once the attempt on its way when the caller gave up has settled: undoes a conversion it landed, drops a mark it renewed; resolves what changed. */
  async #settle(): Promise<ConversionChange | undefined> {
    await this.#inFlight;
    const late = this.#landedLate;
    const change = late ? await this.#undo(late) : this.#maybe && { maybe: this.#maybe };
    if (this.#markSent) await this.#dropMark();
    return change;
  }

  /** Takes the pending upgrade's mark out (a failure leaves it to lapse, {@link MARK_LEASE} after it was written). */
  async #dropMark(): Promise<void> {
    await dropUpgrade(this.site.engine, this.target, this.lock, this.call);
  }

  /** Converts `late` back to the lock's old tag; if that is refused, the lock stays as it landed (and may have moved back, if that reply was lost). */
  async #undo(late: Acquired): Promise<ConversionChange> {
    const { engine } = this.site;
    try {
      const back = await convertLock(engine, late.target, late.lock, this.lock.tag, engine.rule(this.lock.tag).lease, this.call);
      return { lock: back.lock, appliedAt: back.appliedAt };
    } catch (error) {
      const found = conversionLanded(error);
      if (found) return { lock: found.lock, appliedAt: found.appliedAt };
      this.#moved(late);
      const maybeBack = conversionMayHaveLanded(error);
      return { lock: late.lock, appliedAt: late.appliedAt, ...(maybeBack && { maybe: maybeBack }) };
    }
  }

  /** The lock moved to the new tag without the call resolving: this process's waiters learn it, as for a conversion that resolves. */
  #moved(converted: Acquired): void {
    this.site.waiters.released(this.target._id, this.lock.tag, this.lock.id);
    this.site.waiters.acquired(this.target._id, this.lock.id, converted.lock.tag, converted.lock.expiresAt);
  }
}
