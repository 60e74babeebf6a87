import type { Document } from 'mongodb';
import { lockError } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { FIXED_PER_LOCK, readParams, type CallOptions, type ResolvedCallOptions } from '../common/options';
import { expectFilter } from '../common/validation';
import type { DocumentLock } from './document-lock';
import type { LockEngine } from '../engine/lock-engine';
import type { Inspection } from '../engine/store';
import { NEVER } from '../protocol/lock-data';
import { readHolds, type ReadHold } from '../protocol/lock-reading';
import { usedPermits } from '../protocol/permits';
import { limitNumber, windowOf } from '../protocol/rate-window';
import { pendingUpgrade } from '../protocol/convert';
import { liveQuarantine } from '../protocol/quarantine';
import type { LockPaths, StoredLock } from '../protocol/stored-format';

/** Per-call options of `inspect`: a read, so only its deadline and the boom module. */
export type InspectParams = Pick<CallOptions, 'timeout' | 'boom'>;

export const INSPECT_PARAMS = knownKeys<InspectParams>()(['timeout', 'boom'], {
  ...FIXED_PER_LOCK,
  w: 'inspect writes nothing: it has no write concern',
  releaseW: 'inspect writes nothing: it has no write concern',
});

/** A live lock, as `inspect` reads it. */
export interface InspectedLock {
  /** The lock's id (what its handle's `id` is). */
  readonly id: string;
  readonly tag: string;
  /** When it was acquired, by the server's clock. */
  readonly acquiredAt: Date;
  /** When its lease ends, by the server's clock; null: it has none. */
  readonly expiresAt: Date | null;
  /** ms of the lease left when it was read, by the server's clock (`Infinity`: no lease). */
  readonly remaining: number;
  /** The permits it holds, for a tag with a limit (a semaphore); absent otherwise. */
  readonly permits?: number;
  /** The owner whose hold it is (reentrant locks: each nested hold is listed); absent otherwise. */
  readonly owner?: string;
  /** Its fencing token, where the document keeps it (an owner's holds); other locks' tokens are their handles' (see `fence` below). */
  readonly fence?: number;
  /** Released before its minimum hold (`minHold`) ended: no hold any more, but it refuses others as one until this time (its `expiresAt`), by the server's clock; absent otherwise. */
  readonly keptUntil?: Date;
}

/** A waiter's place in a fair queue, as `inspect` reads it. */
export interface InspectedWaiter {
  /** The ticket's id. */
  readonly id: string;
  /** The tag it waits for. */
  readonly tag: string;
  /** When it took its place, by the server's clock. */
  readonly since: Date;
  /** When its place lapses unless the waiter renews it (it does while it waits). */
  readonly expiresAt: Date;
}

/**
 * What `inspect(filter)` read of a document's lock, on the primary, without writing anything: the
 * locks live by the server's clock, and the fair-mode waiters. A look, not a promise: by the time
 * the caller acts on it, a lock may have been released, taken or have expired.
 */
export interface LockInspection {
  /** The inspected document's `_id`. */
  readonly documentId: unknown;
  /** The server's clock when it was read: what "live" is judged by. */
  readonly serverTime: Date;
  /** The document's fencing counter: the token of its latest acquisition (0: never locked); the next one is larger. */
  readonly fence: number;
  /** The live locks of this lock's tags, oldest first. */
  readonly locks: readonly InspectedLock[];
  /** Fair mode: the live waiters of this lock's tags, first in line first. */
  readonly waiting: readonly InspectedWaiter[];
  /**
   * Tags with a limit (a semaphore's `permit`, a multiLock's `limits`): the permits held and the
   * limit they were taken under, as stored in the document (null before its first acquisition),
   * and for a rate limit (permits taken with `minHold`) its window in ms.
   */
  readonly permits: Readonly<Record<string, { readonly used: number; readonly limit: number | null; readonly window?: number }>>;
  /** A pending upgrade (a conversion that waits, with writer preference): the converting lock's id, the tag it waits to become, when its mark lapses unless renewed. */
  readonly upgrade: { readonly lockId: string; readonly tag: string; readonly expiresAt: Date } | null;
  /** A live quarantine mark (every acquisition is refused with `Quarantined` while it lasts): its reason, when it was set and ends (null: when it is cleared), by the server's clock, and the id of the lock whose holder set it; null: none. */
  readonly quarantine: { readonly reason: string; readonly since: Date; readonly until: Date | null; readonly by: string } | null;
}

/** The inspection of the document `seen` read (its lock property and the server's clock), limited to `tags`. */
export function inspectionOf(seen: Inspection & { value: Document }, paths: LockPaths, tags: ReadonlySet<string>, limited: readonly string[] = []): LockInspection {
  const serverTime = seen.serverNow ?? new Date(0);
  const now = serverTime.getTime();
  const stored = paths.read(seen.value);
  const { entries, tickets } = readHolds(stored, now);
  const ours = (hold: ReadHold): boolean => hold.live && tags.has(hold.tag);
  return {
    documentId: seen.value._id,
    serverTime,
    fence: typeof stored.fence === 'number' ? stored.fence : 0,
    locks: entries.filter(ours).map((entry) => {
      const endless = entry.exp.getTime() >= NEVER;
      const { permits, owner, fence, kept } = entry.extra;
      return {
        id: entry.id,
        tag: entry.tag,
        acquiredAt: entry.at,
        expiresAt: endless ? null : entry.exp,
        remaining: endless ? Infinity : entry.exp.getTime() - now,
        ...(typeof permits === 'number' && { permits }),
        ...(typeof owner === 'string' && { owner }),
        ...(typeof fence === 'number' && { fence }),
        ...(kept === true && { keptUntil: entry.exp }),
      };
    }),
    waiting: tickets.filter(ours).map((ticket) => ({ id: ticket.id, tag: ticket.tag, since: ticket.at, expiresAt: ticket.exp })),
    permits: Object.fromEntries(limited.map((tag) => [tag, { used: usedPermits(stored, tag, now), limit: limitNumber(stored.limits?.[tag]), ...windowEntry(stored.limits?.[tag]) }])),
    upgrade: upgradeOf(stored, now, tags),
    quarantine: quarantineOf(stored, now),
  };
}

/** The live quarantine mark, if any. */
function quarantineOf(stored: StoredLock, now: number): LockInspection['quarantine'] {
  const mark = liveQuarantine(stored, now);
  return mark ? { reason: mark.reason, since: mark.since, until: mark.until instanceof Date ? mark.until : null, by: mark.by } : null;
}

/** A rate limit's window, as an inspection shows it (nothing for a plain limit). */
function windowEntry(stored: unknown): { window?: number } {
  const window = windowOf(stored);
  return window === undefined ? {} : { window };
}

/** The live pending upgrade of one of `tags`, if any. */
function upgradeOf(stored: StoredLock, now: number, tags: ReadonlySet<string>): LockInspection['upgrade'] {
  const mark = pendingUpgrade(stored, now);
  return mark && tags.has(mark.tag) ? { lockId: mark.id, tag: mark.tag, expiresAt: mark.exp } : null;
}

/** The `inspect(filter, params?)` method of a document lock. */
export function inspectMethod(core: DocumentLock): (filter: unknown, params: unknown) => Promise<LockInspection> {
  return (filter, params) =>
    core.run(async () => inspectDocument(core.engine, expectFilter('filter', filter), core.callOptions(readParams('params', params, INSPECT_PARAMS)).call));
}

/** Reads the live locks of the first document `filter` matches (one aggregate on the primary, no write); `RessourceNotFound` when none does. */
export async function inspectDocument(engine: LockEngine, filter: Document, call: ResolvedCallOptions): Promise<LockInspection> {
  const seen = await engine.read(filter, call);
  if (!seen.value) throw lockError('RessourceNotFound', call.boom, { detail: 'no document matches the filter' });
  const limited = [...engine.tags].filter((tag) => engine.rule(tag).limit !== undefined);
  return inspectionOf({ ...seen, value: seen.value }, engine.paths, engine.tags, limited);
}
