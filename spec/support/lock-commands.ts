/**
 * Which lock write a driver call is, told from its arguments (`findOneAndUpdate`/`updateOne`:
 * filter, update, options), for fault plans that hold one kind of write back
 * (`delayedCollection(collection, { request: (method, n, args) => … })`).
 */
import type { Collection, Document } from 'mongodb';
import { isHandOverCall } from '../../stress/delayed-collection';
import { realNow } from './clock';

/** A promise that never settles: a request or reply lost for good. */
export const never = new Promise<never>(() => undefined);

const updateOf = (args: readonly unknown[]): Document => (args[1] ?? {}) as Document;

/** An acquisition: it increments the fence. */
export const isAcquisition = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && updateOf(args).$inc?.['lock.fence'] === 1;

/** A hand-over: an acquisition that requires the holder's entry (`{ id }`) to be there. */
export const isHandOver = isHandOverCall;

/** An extension: it sets its own entry's expiry (not a fair ticket's: {@link isTicketRenewal}). */
export const isExtension = (method: string, args: readonly unknown[]): boolean =>
  method === 'findOneAndUpdate' && !isTicketRenewal(method, args) && Object.keys(updateOf(args).$set ?? {}).some((path) => path.endsWith('.$[mine].exp'));

/** A commit: a release that leaves its record. */
export const isCommit = (method: string, args: readonly unknown[]): boolean => method === 'updateOne' && updateOf(args).$push?.['lock.committed'] !== undefined;

/** A plain release at w: 1 (the settling removal of a commit is sent at majority). */
export const isPlainRelease = (method: string, args: readonly unknown[]): boolean =>
  method === 'updateOne' && updateOf(args).$push === undefined && (args[2] as { writeConcern?: { w?: unknown } } | undefined)?.writeConcern?.w !== 'majority';

/** A fair ticket taken: it pushes onto the document's queue. */
export const isTicketTake = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && updateOf(args).$push?.['lock.queue'] !== undefined;

/** A fair ticket renewed (a look, or the background renewal): it sets its own ticket's expiry in the queue. */
export const isTicketRenewal = (method: string, args: readonly unknown[]): boolean =>
  method === 'findOneAndUpdate' && Object.keys(updateOf(args).$set ?? {}).some((path) => path.includes('queue') && path.endsWith('.$[mine].exp'));

/** A promise and the function that settles it: a gate a held request waits at. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** How a call settled: 'resolved', or its error. */
export async function outcomeOf(promise: PromiseLike<unknown>): Promise<'resolved' | (Error & { data?: { applied?: unknown } } & Record<string, unknown>)> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    return error as Error & { data?: { applied?: unknown } } & Record<string, unknown>;
  }
}

/** What another acquisition of the document `filter` selects gets now: 'acquired' (then it lets go at once), or the refusal's subtype (its message for other errors). */
export async function whatAnAcquisitionGets(lock: { acquire(filter: Document): PromiseLike<{ release(): PromiseLike<void> }> }, filter: Document): Promise<string> {
  try {
    const handle = await lock.acquire(filter);
    await handle.release();
    return 'acquired';
  } catch (error) {
    return String((error as { subtype?: string }).subtype ?? error);
  }
}

/** Releases what an acquisition resolved, if it is a handle. */
async function releaseIfHeld(value: unknown): Promise<void> {
  const release = (value as { release?: () => PromiseLike<void> } | undefined)?.release;
  if (typeof release === 'function') await release.call(value);
}

/** How an acquisition settled: 'acquired' (its handle is then released) or `rejected: <subtype>` (its message for other errors). */
export function acquiredOrRejected(promise: PromiseLike<unknown>): Promise<string> {
  return Promise.resolve(promise).then(
    async (handle) => (await releaseIfHeld(handle), 'acquired'),
    (error: Error & { subtype?: string }) => `rejected: ${error.subtype ?? error.message}`,
  );
}

/** How and when an acquisition settled, `since` a realNow(): `resolved after N ms` (its handle is then released) or `<subtype> after N ms`. */
export function settleTime(promise: PromiseLike<unknown>, since: number): Promise<string> {
  const after = (): string => `after ${Math.round(realNow() - since)} ms`;
  return Promise.resolve(promise).then(
    async (handle) => {
      const outcome = `resolved ${after()}`;
      await releaseIfHeld(handle);
      return outcome;
    },
    (error: Error & { subtype?: string }) => `${error.subtype ?? error.name} ${after()}`,
  );
}

/** The fair queue (`lock.queue`) of document `id`, as stored: its tickets, first in line first. */
export async function queueOf(collection: Collection<Document>, id: unknown): Promise<Array<{ id: string; tag: string; at: Date; exp: Date }>> {
  return ((await collection.findOne({ _id: id as never }))?.lock?.queue ?? []) as Array<{ id: string; tag: string; at: Date; exp: Date }>;
}

/** How many of `queue`'s tickets are live by this machine's clock. */
export function liveTickets(queue: ReadonlyArray<{ exp: Date }>): number {
  return queue.filter((ticket) => ticket.exp.getTime() > Date.now()).length;
}

/** A lock entry as stored in a document's `lock.tags`. */
export interface StoredEntry {
  readonly id: string;
  readonly exp: Date;
  readonly [field: string]: unknown;
}

/** The unexpired lock entries of the document `_id` (read directly): of `tag`, or of every tag. */
export async function liveEntries(collection: Collection<Document>, id: unknown, tag?: string): Promise<StoredEntry[]> {
  const doc = await collection.findOne({ _id: id as never });
  const tags = (doc?.lock?.tags ?? {}) as Record<string, StoredEntry[]>;
  return (tag === undefined ? Object.values(tags).flat() : (tags[tag] ?? [])).filter((entry) => entry.exp.getTime() > realNow());
}

/** Resolves once `condition` holds (true), or after `ms` (false, if it still does not). */
export async function until(condition: () => boolean | Promise<boolean>, ms = 5_000): Promise<boolean> {
  const deadline = realNow() + ms;
  while (!(await condition())) {
    if (realNow() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}
