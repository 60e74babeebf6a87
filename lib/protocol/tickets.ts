import type { Document } from 'mongodb';
import type { Ticket } from './lock-data';
import type { LockOperation } from './operation';
import { allOf, stampWithin, type LockPaths, type StoredLock, type StoredTicket } from './stored-format';

/**
 * Take a ticket (fair mode): a place in the queue of the first document matching `filter`,
 * stamped from a server-checked clock (the stamp within `tolerance` below `$$NOW`), live until
 * its `exp` unless renewed. A ticket only ever delays acquisitions (they check that no live
 * ticket of a cooperative tag came first); it is never a lock, so it cannot admit a second holder.
 */
export function takeTicketOperation(paths: LockPaths, filter: Document, ticket: Ticket, tolerance: number): LockOperation {
  return {
    filter: allOf(filter, [{ $expr: stampWithin(ticket.at, tolerance) }]),
    update: { $push: { [paths.queue]: ticket }, $currentDate: { [paths.now]: true }, $max: { [paths.until]: ticket.exp } },
  };
}

/** Renew a ticket: moves its end to `exp`, while it is still in the queue and `at` is within `tolerance` below `$$NOW`. */
export function renewTicketOperation(paths: LockPaths, target: Document, ticketId: string, at: Date, exp: Date, tolerance: number): LockOperation {
  return {
    filter: allOf(target, [{ [paths.queue]: { $elemMatch: { id: ticketId } } }, { $expr: stampWithin(at, tolerance) }]),
    update: { $set: { [`${paths.queue}.$[mine].exp`]: exp }, $currentDate: { [paths.now]: true }, $max: { [paths.until]: exp } },
    arrayFilters: [{ 'mine.id': ticketId }],
  };
}

/** Drop a ticket: a waiter that gave up leaves the queue. */
export function dropTicketOperation(paths: LockPaths, target: Document, ticketId: string): LockOperation {
  return { filter: target, update: { $pull: { [paths.queue]: { id: ticketId } } } };
}

/**
 * Filter: no live ticket (unexpired at `stamp`) of any of `tags` came before `mine` (by `at`, then
 * `id`); without `mine`, no live ticket of `tags` at all, so a newcomer queues behind every waiter.
 */
export function noEarlierTicket(paths: LockPaths, tags: readonly string[], stamp: Date, mine?: { id: string; at: Date }): Document {
  const earlier = mine ? { $or: [{ at: { $lt: mine.at } }, { at: mine.at, id: { $lt: mine.id } }] } : {};
  return { [paths.queue]: { $not: { $elemMatch: { tag: { $in: [...tags] }, exp: { $gt: stamp }, ...earlier } } } };
}

/** The live tickets of `tags` in `lock` that came before `mine` (all live ones without `mine`), at server time `now` (ms). */
export function earlierTickets(lock: StoredLock, tags: readonly string[], now: number, mine?: { id: string; at: Date }): StoredTicket[] {
  return (lock.queue ?? []).filter(
    (ticket) =>
      tags.includes(ticket.tag) &&
      ticket.exp.getTime() > now &&
      (!mine || ticket.at.getTime() < mine.at.getTime() || (ticket.at.getTime() === mine.at.getTime() && ticket.id < mine.id)),
  );
}
