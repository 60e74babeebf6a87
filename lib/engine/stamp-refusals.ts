import type { Inspection } from './store';

/**
 * Why a stamped write matched nothing: a final error, or a retry with a fresh stamp (checked with
 * the wide tolerance, and no earlier than `minStamp`); `error` is what a last retry reports.
 */
export type Verdict =
  | { readonly retry: false; readonly error: Error }
  | { readonly retry: true; readonly why: string; readonly minStamp?: number; readonly error?: Error };

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
