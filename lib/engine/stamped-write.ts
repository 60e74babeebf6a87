import type { ResolvedCallOptions } from '../common/options';
import { lockError, withDbErrors } from '../common/errors';
import type { ServerClock } from '../protocol/server-clock';
import type { Verdict } from './stamp-refusals';
import type { Document } from 'mongodb';
import type { Inspection, Store, Timed } from './store';
import type { LockPaths } from '../protocol/stored-format';

/** How many times a stamped write is tried before the refusal is reported. */
const STAMP_ATTEMPTS = 3;

/** A stamped write: what it sends, and how a refusal is explained. */
export interface StampedWrite<T> {
  /** The document a refusal is explained from (the caller's filter, or `{ _id }`). */
  readonly target: Document;
  /** The lease the stamp's tolerance is derived from, in ms. */
  readonly lease: number;
  /** Sends the write with `stamp` and `tolerance`; resolves undefined when it matched nothing. */
  readonly write: (stamp: number, tolerance: number) => Promise<T | undefined>;
  /** Says why it matched nothing, from a read of the document; null: report `unexplained()` at once (no read). */
  readonly explain: ((seen: Inspection, stamp: number, tolerance: number) => Verdict) | null;
  readonly unexplained?: () => Error;
}

/**
 * Runs a stamped write: stamps from the lower bound of the server's clock, which the server checks
 * in the same update. When it matches nothing, reads the document and the server's clock (which
 * also tightens the bounds); `explain` says which error that is, or that the stamp was refused, in
 * which case the write is tried again with a fresh stamp and the wide tolerance.
 */
export async function runStamped<T>(clock: ServerClock, store: Store, call: ResolvedCallOptions, stamped: StampedWrite<T>): Promise<T> {
  let relaxed = false;
  let minStamp = 0;
  for (let attempt = 1; ; attempt++) {
    const stamp = Math.max(clock.lower(), minStamp);
    const tolerance = clock.tolerance(stamped.lease, relaxed);
    const result = await withDbErrors(call.boom, () => stamped.write(stamp, tolerance));
    if (result !== undefined) return result;
    if (!stamped.explain) throw stamped.unexplained?.() ?? new Error('refused');
    const seen = await withDbErrors(call.boom, () => store.inspect(stamped.target, call));
    if (seen.serverNow) clock.observe(seen.serverNow, seen.sentAt, seen.arrivedAt);
    const verdict = stamped.explain(seen, stamp, tolerance);
    if (!verdict.retry) throw verdict.error;
    if (attempt === STAMP_ATTEMPTS) {
      throw verdict.error ?? lockError('DbError', call.boom, { detail: `the server refused the lock's time stamp ${STAMP_ATTEMPTS} times: ${verdict.why}` });
    }
    relaxed = true;
    minStamp = verdict.minStamp ?? 0;
  }
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
