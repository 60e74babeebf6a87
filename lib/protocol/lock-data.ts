import type { StoredLock } from './stored-format';

/** A lock as plain data: what `JSON.stringify(handle)` gives and what `release`/`extend` accept back. */
export interface LockData {
  /** 128 random bits, hex: the proof of ownership. */
  readonly id: string;
  /** The tag (`write` for writeLock). */
  readonly tag: string;
  /** Acquisition time, ms since the epoch by the server's clock (monglock v2's token). */
  readonly timestamp: number;
  /** Fencing token: strictly increases per document over all acquisitions, never reset. */
  readonly fence: number;
  /** When the lease ends, ms since the epoch by the server's clock. */
  readonly expiresAt: number;
  /** The permits it holds, for a tag with a limit (a semaphore); absent otherwise. */
  readonly permits?: number | undefined;
  /** The owner whose hold it is, for a reentrant acquisition (`params.owner`); absent otherwise. */
  readonly owner?: string | undefined;
  /** A lock taken with `minHold`: when its minimum hold ends, ms since the epoch by the server's clock (`timestamp` + minHold); absent otherwise. */
  readonly minHoldUntil?: number | undefined;
  /** A tag a conversion whose reply was lost may have moved it to: a release looks for it there too, and a commit or extension refused under `tag` is sent again there. */
  readonly maybeTag?: string | undefined;
  /** Passed back as plain data without `minHoldUntil`: its release or hand-over removes its entry only without a hold (else keeps it), its extension reads the entry first (lib/engine/stored-hold.ts). Never in its JSON. @internal */
  readonly holdUnknown?: true | undefined;
}

/** A lock as a release claims it: `landsBy`, when its acquisition can no longer land (0: confirmed); `lapsed`, its lease keeper gave it up (no extension came in time). */
export interface ClaimedLock extends LockData {
  readonly landsBy?: number;
  readonly lapsed?: boolean;
}

/** A waiter's ticket in a fair queue (`lock.queue`). */
export interface Ticket {
  readonly id: string;
  readonly tag: string;
  readonly at: Date;
  readonly exp: Date;
}

/** Everything the protocol needs to know about one tag. */
export interface TagRule {
  readonly tag: string;
  /** Default lease, in ms. */
  readonly lease: number;
  /** Tags whose unexpired locks refuse this one. */
  readonly cooperative: readonly string[];
  /** Tags whose unexpired locks this one registers beside, and waits for before it may write. */
  readonly assertive: readonly string[];
  /** Cooperative with itself: at most one unexpired lock of this tag at a time. */
  readonly exclusive: boolean;
  /** A counting semaphore: the most permits its unexpired locks may hold in all (never with `exclusive`). */
  readonly limit?: number;
  /** Tags whose pending upgrade (a conversion waiting for this tag's locks) refuses new locks of this tag: writer preference. */
  readonly yieldsToUpgradesOf?: readonly string[];
}

/**
 * The tags whose earlier fair-mode tickets an acquisition of `rule` queues behind: those it is
 * cooperative with, and its own when it has a limit (a large request is not overtaken by a
 * stream of small ones).
 */
export function queuedBehind(rule: TagRule): readonly string[] {
  return rule.limit === undefined ? rule.cooperative : [...rule.cooperative, rule.tag];
}

/** The tags whose locks an acquisition of `rule` waits for: cooperative, asserted over, and its own when limited. */
export function waitsFor(rule: TagRule): ReadonlySet<string> {
  return new Set([...queuedBehind(rule), ...rule.assertive]);
}

/** Expiry of a lock without a lease: the last ms of year 9999. */
export const NEVER = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * The fencing token of a stored lock: its counter, on top of the document's birth time × 1000
 * for resource documents (so that a purged and re-created resource keeps counting upwards).
 */
export function fenceOf(lock: StoredLock): number {
  const born = lock.born instanceof Date ? lock.born.getTime() * 1000 : 0;
  return born + (lock.fence ?? 0);
}
