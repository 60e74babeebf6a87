import type { Document } from 'mongodb';
import { withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { handOverOperation } from '../protocol/hand-over';
import { fenceOf, type LockData, type TagRule, type Ticket } from '../protocol/lock-data';
import { newLockId } from '../protocol/lock-ids';
import { withdrawOperation } from '../protocol/release';
import { landing, type Acquired } from './acquired';
import { observeWrite, skewError, type WriteSettings } from './stamped-write';
import { failedAcquisition } from './write-failures';
import { addressOf } from './address';

/** What the waiter a lock is handed to asks for: its lease, its write concern, its fair ticket. */
export interface GranteeTerms {
  /** Its lease, in ms. */
  readonly lease: number;
  /** The write concern of its acquisition (the hand-over is sent with it, or the holder's `releaseW` if stronger). */
  readonly w: ResolvedCallOptions['w'];
  /** Fair mode: its ticket, if it has one by now (undefined when not fair). */
  readonly fairness: () => { readonly ticket?: Ticket } | undefined;
  /** False while a ticket of another process came before its own, as it last saw its queue (fair mode): a hand-over could only fail. */
  readonly ready?: () => boolean;
  /** True while its fair ticket's take is on its way: it is handed the lock awake, judged at that ticket's place. */
  readonly placing?: () => boolean;
}

/** A hand-over whose write failed: it may have landed, or may still land while the holder's entry is there. */
export class HandOverFailed extends Error {
  constructor(
    /** The holder's error (a `DbError`: its release may or may not have been applied). */
    readonly holderError: Error,
    /** The waiter's error (a `DbError` carrying the lock that may have been written for it, `err.lock`). */
    readonly granteeError: Error,
    /** The lock that may have been written for the waiter. */
    readonly written: Acquired,
  ) {
    super(holderError.message);
  }
}

/**
 * Hands `holder`'s lock (an exclusive tag's, on the document `target` addresses) over to a
 * waiter of this process in one update ({@link handOverOperation}), stamped from the lower bound of
 * the server's clock: resolves the waiter's lock, or undefined when the update matched nothing
 * (the holder's lock is gone, a fair ticket came first, or the stamp was refused: the holder then
 * releases as usual), also without sending anything when the replies show clocks further apart
 * than assumed (the waiter's own acquisition then says so). Nothing is read to explain a miss. A
 * write that failed, or whose own reply shows such clocks, rejects with {@link HandOverFailed}.
 */
export async function handOver(
  settings: WriteSettings,
  tags: Iterable<string>,
  rule: TagRule,
  target: Document,
  holder: LockData,
  terms: GranteeTerms,
  call: ResolvedCallOptions,
): Promise<Acquired | undefined> {
  const { paths, clock, store } = settings;
  if (clock.excessSkew() !== undefined) return undefined;
  let stamp = 0;
  let tolerance = 0;
  let lock = { id: newLockId(), tag: rule.tag, timestamp: 0, fence: 0, expiresAt: 0 };
  let reply;
  try {
    // Stamped as the hand-over leaves its client's queue of lock commands, not when it joins it.
    reply = await withDbErrors(call.boom, () =>
      store.admitted(call, () => {
        stamp = clock.stamp();
        tolerance = clock.tolerance(terms.lease);
        const entry = { id: lock.id, at: new Date(stamp), exp: new Date(clock.expiry(stamp, terms.lease)) };
        lock = { ...lock, timestamp: stamp, expiresAt: entry.exp.getTime() };
        const operation = handOverOperation({ paths, rule, tags, filter: target, entry, tolerance, fair: terms.fairness(), holder: holder.id, ...(holder.holdUnknown && { replacingHasNoHold: true }) });
        return store.applyForToken(operation, call, handOverConcern(terms.w, call.releaseW));
      }),
    );
  } catch (error) {
    const cause = (error as { cause?: unknown }).cause ?? error;
    const written: Acquired = { lock, target, ...landing(stamp, tolerance, call) };
    throw new HandOverFailed(error as Error, failedAcquisition(cause, call.boom, written), written);
  }
  if (!reply.value) return undefined;
  observeWrite(settings, reply.value, reply);
  const handed: Acquired = { lock: { ...lock, fence: fenceOf(paths.read(reply.value)) }, target: addressOf(reply.value, store.shardKey) };
  const skew = clock.excessSkew();
  if (skew === undefined) return handed;
  // Its own reply shows clocks further apart than assumed: the stamp that judged the other entries
  // expired may have been wrong, so the waiter's lock must not stand. Settled as a hand-over whose
  // outcome is taken back (lib/locks/hand-over.ts): the waiter's entry withdrawn, and its own next
  // attempt refused naming the skew.
  const refused = skewError(skew, clock.skew, call);
  throw new HandOverFailed(refused, failedAcquisition(refused, call.boom, handed), handed);
}

/**
 * Settles a hand-over whose write failed, once the holder's entry is known to be gone (so that it
 * can no longer land): withdraws the waiter's entry, if it is there ({@link withdrawOperation}, at
 * the hand-over's write concern). Resolves true when it was (the hand-over landed: the holder's lock was released by it),
 * false when it was not. The waiter then acquires by itself: the fencing token the hand-over
 * gave it cannot be read back for sure (an acquisition of a concurrent tag may have counted since).
 */
export async function withdrawHandOver(settings: WriteSettings, written: Acquired, terms: GranteeTerms, call: ResolvedCallOptions): Promise<boolean> {
  const operation = withdrawOperation(settings.paths, written.target, written.lock.tag, written.lock.id);
  return withDbErrors(call.boom, () => settings.store.applyOne(operation, call, handOverConcern(terms.w, call.releaseW)));
}

/** The write concern of a hand-over: the stronger of the waiter's acquisition's and the holder's release's. */
function handOverConcern(acquisition: ResolvedCallOptions['w'], release: ResolvedCallOptions['w']): ResolvedCallOptions['w'] {
  if (acquisition === 'majority' || release === 'majority') return 'majority';
  return Math.max(acquisition, release);
}
