import type { Inspection } from './store';

/**
 * Why a stamped write matched nothing: a final error, or a retry with a fresh stamp (checked with
 * the wide tolerance, and no earlier than `minStamp`); `error` is what a last retry reports.
 */
export type Verdict =
  | {
      readonly retry: false;
      readonly error: Error;
      /** The read showed nothing that refuses the write (it names no holder, no stamp out of the window): a refusal of a guessed stamp is then tried again. */
      readonly unfounded?: boolean;
    }
  | {
      readonly retry: true;
      readonly why: string;
      readonly minStamp?: number;
      readonly error?: Error;
      /** The retry waits until the server's clock has passed this time (ms): its stamp cannot be both at or after `minStamp` and at or before `$$NOW` sooner. */
      readonly waitUntil?: number;
    };

/**
 * The verdict on a stamp refused because an acquisition of the exclusive tag was stamped later
 * (`latest`; stamps of an exclusive tag never decrease): retry from `latest`. When the server's
 * clock is behind `latest` (a failover to a primary whose clock is behind, or a clock set back),
 * no such stamp passes the server's check before its clock has caught up: the retry waits for it.
 */
export function laterStampVerdict(seen: Inspection, latest: number, error: Error): Verdict {
  const now = seen.serverNow?.getTime();
  const behind = now !== undefined && latest > now;
  return { retry: true, why: 'a later acquisition was stamped meanwhile', minStamp: latest, error, ...(behind && { waitUntil: latest }) };
}

/**
 * True when `stamp` may have failed the server's window check: it is ahead of the server's
 * clock, or further behind it than the tolerance (judged at the later inspection, so generously).
 */
export function stampRefused(seen: Inspection, stamp: number, tolerance: number): boolean {
  if (!seen.serverNow) return false;
  const now = seen.serverNow.getTime();
  return stamp > now || stamp < now - tolerance;
}

/** What a refused stamp says about the connection, for the error a caller sees. */
export function stampLag(seen: Inspection, stamp: number, tolerance: number, lease: number): string {
  const now = seen.serverNow?.getTime();
  if (now !== undefined && stamp > now) return `the stamp was ${stamp - now} ms ahead of the server's clock (was the server's clock set back?)`;
  const lag = now === undefined ? 'more than the tolerance' : `${now - stamp} ms`;
  return (
    `the request reached the server too late: the server's clock was ${lag} past the stamp when it was read back, ` +
    `beyond the ${tolerance} ms tolerance (a lease of ${lease} ms allows at most half of it, up to 5 s); ` +
    `the network or the server is slower than this lease allows`
  );
}
