import type { StoredLock } from './stored-format';

/** One entry (a lock) or ticket (a fair-mode waiter) of a stored lock, as read at a server time. */
export interface ReadHold {
  readonly id: string;
  readonly tag: string;
  /** When it was taken (the acquisition's stamp, or when the waiter came), by the server's clock. */
  readonly at: Date;
  /** When it ends, by the server's clock. */
  readonly exp: Date;
  /** Unexpired at the time it was read. */
  readonly live: boolean;
  /** The fields a lock kind stores besides (resource locks: owner, host, comment). */
  readonly extra: Readonly<Record<string, unknown>>;
}

/**
 * Reads a stored lock at server time `now` (ms): its entries, oldest first, and its fair-mode
 * tickets, first in line first (by `at`, then id, as acquisitions order them). The one reading of
 * the stored format that `inspect()` and the CLI share.
 */
export function readHolds(lock: StoredLock, now: number): { entries: ReadHold[]; tickets: ReadHold[] } {
  const read = (tag: string, stored: { id: string; at: Date; exp: Date }): ReadHold => {
    const { id, at, exp, ...extra } = stored as { id: string; at: Date; exp: Date; tag?: unknown };
    delete extra.tag;
    return { id, tag, at, exp, live: exp instanceof Date && exp.getTime() > now, extra };
  };
  const byAge = (a: ReadHold, b: ReadHold): number => a.at.getTime() - b.at.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  const entries = Object.entries(lock.tags ?? {}).flatMap(([tag, list]) => (Array.isArray(list) ? list.map((entry) => read(tag, entry)) : []));
  const tickets = (Array.isArray(lock.queue) ? lock.queue : []).map((ticket) => read(ticket.tag, ticket));
  return { entries: entries.sort(byAge), tickets: tickets.sort(byAge) };
}
