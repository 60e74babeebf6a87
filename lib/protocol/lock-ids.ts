import { randomFillSync } from 'node:crypto';

/** Bytes drawn from the operating system's CSPRNG at once: one system call per 256 ids. */
const POOL_BYTES = 4_096;
const ID_BYTES = 16;

let pool = Buffer.alloc(0);
let offset = POOL_BYTES;

/**
 * A new lock id: 128 bits from the operating system's CSPRNG, as 32 hex digits. Every id is
 * fresh random bits (none is derived from another, so one id tells nothing of the next); they are
 * only drawn 4 KiB at a time, because a system call per id costs more than the rest of an
 * acquisition's own work.
 */
export function newLockId(): string {
  if (offset + ID_BYTES > POOL_BYTES) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_BYTES));
    offset = 0;
  }
  const id = pool.toString('hex', offset, offset + ID_BYTES);
  pool.fill(0, offset, offset + ID_BYTES); // an id handed out never stays in memory twice
  offset += ID_BYTES;
  return id;
}

/** Ticket numbers given in this process so far, one per acquisition call (see {@link newTicketId}). */
let ticketCount = 0;

/**
 * A new fair ticket id: 32 hex digits, a number from {@link ticketNumber} (12 digits) then 80
 * random bits. Tickets are ordered by their stamp, then by id (see `noEarlierTicket`): within
 * one millisecond, this process's tickets then keep the order in which its callers came (with
 * random ids, callers that came together were served in a random order). Between processes, a tie
 * in the same millisecond goes to the lower count.
 */
export function newTicketId(number: number): string {
  return `${number.toString(16).padStart(12, '0')}${newLockId().slice(12)}`;
}

/** The next number of this process's tickets (the count part of {@link newTicketId}), taken when a waiter comes. */
export function ticketNumber(): number {
  return ticketCount++ % 2 ** 48;
}
