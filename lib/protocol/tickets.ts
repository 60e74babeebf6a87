import type { Document } from 'mongodb';
import type { Ticket } from './lock-data';
import type { LockOperation } from './operation';
import { allOf, stampWithin, type LockPaths } from './stored-format';

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
