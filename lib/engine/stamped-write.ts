import type { ResolvedCallOptions } from '../common/options';
import { lockError, withDbErrors } from '../common/errors';
import type { ServerClock } from '../protocol/server-clock';
import type { Verdict } from './stamp-refusals';
import type { Document } from 'mongodb';
import type { Inspection, Store, Timed } from './store';
import { LockPaths } from '../protocol/stored-format';
import { clockStampOperation } from '../protocol/clock-stamp';
import { AbandonedAttemptError } from './deadlines';

/** How many times a stamped write is tried before the refusal is reported. */
const STAMP_ATTEMPTS = 3;

/** A stamped write: what it sends, and how a refusal is explained. */
export interface StampedWrite<T> {
  /** The document a refusal is explained from (the caller's filter, or `{ _id }`). */
  readonly target: Document;
  /**
   * A narrower filter the refusal is explained from instead (an acquisition by a filter that may
   * match several documents: its matches without a live quarantine mark, which it skips), read
   * only when `needed` says so of the document `target` selected (its first match carries a live
   * mark: a caller that quarantines nothing reads once, as before); when it matches nothing, the
   * refusal is explained from `target`'s document.
   */
  readonly explainFirst?: { readonly filter: Document; readonly needed: (seen: Inspection) => boolean };
  /** The lease the stamp's tolerance is derived from, in ms. */
  readonly lease: number;
  /**
   * Sends the write with `stamp` and `tolerance`; resolves undefined when it matched nothing. It is
   * called once the write may leave its client's queue of lock commands, and its first command
   * must be sent before its first `await` ({@link Store.admitted}): that command carries the stamp.
   */
  readonly write: (stamp: number, tolerance: number) => Promise<T | undefined>;
  /** Says why it matched nothing, from a read of the document; null: report `unexplained()` at once (no read). */
  readonly explain: ((seen: Inspection, stamp: number, tolerance: number) => Verdict) | null;
  readonly unexplained?: () => Error;
}

/**
 * Runs a stamped write: stamps from the lower bound of the server's clock, as the write leaves its
 * client's queue of lock commands (never while it waits there), and the server checks the stamp in
 * the same update. When it matches nothing, reads the document and the server's clock (which also
 * tightens the bounds); `explain` says which error that is, or that the stamp was refused, in
 * which case the write is tried again with a fresh stamp and the wide tolerance, as it is after
 * a refusal of a guessed stamp (taken before the client saw the server's clock) that the read
 * finds nothing to explain. Where a skew
 * between clocks is assumed, a stamp is never a guess ({@link observeBeforeStamping}), and a skew
 * beyond it that the replies show fails the write before every stamp ({@link skewError}).
 */
export async function runStamped<T>(clock: ServerClock, store: Store, call: ResolvedCallOptions, stamped: StampedWrite<T>): Promise<T> {
  let relaxed = false;
  let minStamp = 0;
  let waited = 0;
  if (clock.skew > 0) await observeBeforeStamping(clock, store, call, stamped.target);
  for (let attempt = 1; ; attempt++) {
    let stamp = 0;
    let tolerance = 0;
    let guessed = false;
    // Stamped as the write leaves its client's queue of lock commands, not when it joins it: time queued never eats into the tolerance.
    const result = await withDbErrors(call.boom, () =>
      store.admitted(call, () => {
        if (call.abandoned?.()) throw new AbandonedAttemptError();
        refuseExcessSkew(clock, call);
        guessed = !clock.synchronized;
        stamp = Math.max(clock.stamp(), minStamp);
        tolerance = clock.tolerance(stamped.lease, relaxed);
        return stamped.write(stamp, tolerance);
      }),
    );
    if (result !== undefined) return result;
    if (!stamped.explain) throw stamped.unexplained?.() ?? new Error('refused');
    const first = await readClock(clock, store, call, stamped.target);
    const preferred = stamped.explainFirst?.needed(first) ? await readClock(clock, store, call, stamped.explainFirst.filter) : undefined;
    const seen = preferred?.value ? preferred : first;
    const verdict = stamped.explain(seen, stamp, tolerance);
    if (!verdict.retry) {
      // A guessed stamp (the local clock, before any reply) ahead of $$NOW when the update ran may be behind it by the read: a refusal the read cannot explain proves nothing, try once more on the bounds just read.
      if (guessed && clock.synchronized && verdict.unfounded) continue;
      throw verdict.error;
    }
    relaxed = true;
    minStamp = verdict.minStamp ?? 0;
    if (verdict.waitUntil !== undefined) {
      // The server's clock is behind a stamp the document holds: wait for it to pass (within `timeout`), then try again.
      const wait = Math.max(1, clock.untilPast(verdict.waitUntil));
      if (waited + wait > call.timeout) throw clockBehindError(wait, call);
      await new Promise((resolve) => setTimeout(resolve, wait));
      waited += wait;
      attempt--; // waiting for the clock is not a refused stamp
      continue;
    }
    if (attempt === STAMP_ATTEMPTS) {
      throw verdict.error ?? lockError('DbError', call.boom, { detail: `the server refused the lock's time stamp ${STAMP_ATTEMPTS} times: ${verdict.why}` });
    }
  }
}

/** The `DbError` of a server whose clock would stay behind the stamp of the document's last acquisition for `behindMs` more, beyond the call's `timeout`. */
function clockBehindError(behindMs: number, call: ResolvedCallOptions): Error {
  return lockError('DbError', call.boom, {
    detail:
      `the server's clock is about ${behindMs} ms behind the stamp of this document's last acquisition ` +
      `(a failover to a primary whose clock is behind, or a clock set back), longer than the call's ${call.timeout} ms timeout allows to wait for it: ` +
      `keep the members' clocks in sync (NTP)`,
  });
}

/**
 * What a stamped write observes before its first stamp, where a skew between clocks is assumed
 * (none is on a standalone server or a replica set, nor with `maxClockSkew: 0`: nothing then, the
 * server checks the stamp). With several clocks (a sharded cluster): a router's (a read's `$$NOW`)
 * and the clock of the shard holding the document (a write of its clock), at once, until both were
 * seen and again once the shard's clock seen is stale ({@link ServerClock.shardClockStale}), so that
 * a skew beyond the one assumed fails the call before any write judges a lock by it. With one
 * clock: the server's clock.
 */
async function observeBeforeStamping(clock: ServerClock, store: Store, call: ResolvedCallOptions, target: Document): Promise<void> {
  if (clock.severalClocks && (!clock.sawBothClocks || clock.shardClockStale)) await Promise.all([readClock(clock, store, call, target), stampClock(clock, store, call, target)]);
  else if (!clock.synchronized) await readClock(clock, store, call, target);
}

/** Reads the document `target` selects and the server's clock (`$$NOW`) into the bounds, on the primary; throws when the skew between clocks is beyond what is assumed. */
export async function readClock(clock: ServerClock, store: Store, call: ResolvedCallOptions, target: Document): Promise<Inspection> {
  const seen = await withDbErrors(call.boom, () => store.inspect(target, call));
  if (seen.serverNow) clock.observe(seen.serverNow, seen.sentAt, seen.arrivedAt, 'read');
  refuseExcessSkew(clock, call);
  return seen;
}

/**
 * Writes the server's clock into the document `target` selects ({@link clockStampOperation}, at
 * `w: 1`: nothing depends on it lasting), and takes it into the bounds: a shard's clock.
 */
async function stampClock(clock: ServerClock, store: Store, call: ResolvedCallOptions, target: Document): Promise<void> {
  const paths = new LockPaths(store.field);
  const reply = await withDbErrors(call.boom, () => store.applyForToken(clockStampOperation(paths, target), call, 1));
  if (reply.value) observeWrite({ paths, clock }, reply.value, reply);
}

/**
 * Throws {@link skewError} when the replies so far show clocks further apart than the skew
 * assumed; with `updateApplied`, after a write that landed with the caller's update.
 */
export function refuseExcessSkew(clock: ServerClock, call: Pick<ResolvedCallOptions, 'boom'>, updateApplied = false): void {
  const skew = clock.excessSkew();
  if (skew !== undefined) throw skewError(skew, clock.skew, call, updateApplied);
}

/**
 * The `DbError` of a deployment whose clocks are further apart than `maxClockSkew` says. With
 * `updateApplied`, the write that showed it had landed with the caller's update (an extension's):
 * the error says so (`data.applied: true`), as a commit's outcome does.
 */
export function skewError(measured: number, assumed: number, call: Pick<ResolvedCallOptions, 'boom'>, updateApplied = false): Error {
  const outcome = updateApplied
    ? 'the extension had landed with your update, which is applied (the handle keeps the lease it had)'
    : 'so nothing is locked';
  return lockError('DbError', call.boom, {
    detail:
      `the deployment's clocks are at least ${Math.abs(measured)} ms apart (a mongos's $$NOW is ${measured > 0 ? 'ahead of' : 'behind'} ` +
      `the $currentDate of the shard that holds the document), more than the ${assumed} ms that maxClockSkew assumes: ` +
      `a lease judged on one clock could end early on the other, ${outcome}. Fix the servers' time (NTP), or raise maxClockSkew (monglock doctor measures it)`,
    ...(updateApplied && { data: { applied: true } }),
  });
}

/** What a write needs besides its operation: where it goes, and the clock bounds its replies feed. */
export interface WriteSettings {
  readonly store: Store;
  readonly paths: LockPaths;
  readonly clock: ServerClock;
}

/** Learns the server's clock from a write's reply (`$currentDate` of `lock.now`); returns it, in ms. */
export function observeWrite(settings: Pick<WriteSettings, 'paths' | 'clock'>, doc: Document, reply: Timed<unknown>): number {
  const now = settings.paths.read(doc).now;
  if (!(now instanceof Date)) throw new Error(`The server did not return \`${settings.paths.now}\` ($currentDate)`);
  settings.clock.observe(now, reply.sentAt, reply.arrivedAt);
  return now.getTime();
}
