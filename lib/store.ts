import type { Collection, Document, UpdateFilter, WriteConcernSettings } from 'mongodb';
import type { ResolvedCallOptions } from './options';

/** A database call that outlived its `timeout`: the client-side deadline fired first. */
export class DeadlineExceededError extends Error {
  override readonly name = 'DeadlineExceededError';

  constructor(operation: string, ms: number) {
    super(`${operation} did not settle within ${ms} ms`);
  }
}

/** A reply, with the local times at which its request left and it arrived (for the clock bounds). */
export interface Timed<T> {
  readonly value: T;
  readonly sentAt: number;
  readonly arrivedAt: number;
}

/** What `inspect` read: the document's lock property, and the server's clock at that moment. */
export interface Inspection extends Timed<Document | null> {
  /** The server's `$$NOW`; undefined when no document matched. */
  readonly serverNow: Date | undefined;
}

/** Name under which reads project the server's `$$NOW`. */
export const SERVER_NOW = '__monglockServerNow';

/**
 * The only module that talks to the driver for document locks. Every call is bounded by
 * `timeout` three ways: `maxTimeMS` on the server, `wtimeoutMS` for the write concern, and a
 * client-side deadline that settles the promise even when the server is unreachable. Reads that
 * decide a lock outcome go to the primary, whatever the collection's read preference: a
 * secondary would return stale locks and its own clock.
 */
export class Store {
  constructor(
    readonly collection: Collection<Document>,
    readonly field: string,
    protected readonly localNow: () => number,
  ) {}

  /** One atomic update of the first matching document; resolves its lock property (and `_id`) after the update, or null. */
  findOneAndUpdate(
    filter: Document,
    update: Document,
    call: ResolvedCallOptions,
    arrayFilters?: Document[],
  ): Promise<Timed<Document | null>> {
    return this.timed('findOneAndUpdate', call, () =>
      this.collection.findOneAndUpdate(filter, update as UpdateFilter<Document>, {
        returnDocument: 'after',
        projection: { [this.field]: 1 },
        maxTimeMS: call.timeout,
        writeConcern: writeConcern(call),
        ...(arrayFilters ? { arrayFilters } : {}),
      }),
    );
  }

  /** One atomic update of the first matching document; resolves whether one matched. */
  async updateOne(filter: Document, update: Document, call: ResolvedCallOptions): Promise<boolean> {
    const result = await withDeadline('updateOne', call.timeout, () =>
      this.collection.updateOne(filter, update as UpdateFilter<Document>, { maxTimeMS: call.timeout, writeConcern: writeConcern(call) }),
    );
    return result.matchedCount > 0;
  }

  /** Reads the first document matching `filter` (its lock property only) and the server's clock, on the primary. */
  async inspect(filter: Document, call: ResolvedCallOptions): Promise<Inspection> {
    const reply = await this.timed('aggregate', call, () =>
      this.collection
        .aggregate([{ $match: filter }, { $limit: 1 }, { $project: { [this.field]: 1, [SERVER_NOW]: '$$NOW' } }], {
          maxTimeMS: call.timeout,
          readPreference: 'primary',
        })
        .toArray(),
    );
    const doc = reply.value[0] ?? null;
    const serverNow: unknown = doc?.[SERVER_NOW];
    return { ...reply, value: doc, serverNow: serverNow instanceof Date ? serverNow : undefined };
  }

  /** Runs `operation` within the call's deadline and notes when it left and when its reply arrived. */
  protected async timed<T>(name: string, call: ResolvedCallOptions, operation: () => Promise<T>): Promise<Timed<T>> {
    const sentAt = this.localNow();
    const value = await withDeadline(name, call.timeout, operation);
    return { value, sentAt, arrivedAt: this.localNow() };
  }
}

/** The write concern of a lock write: `w`, and `wtimeoutMS` bounded by the call's timeout. */
export function writeConcern(call: ResolvedCallOptions): WriteConcernSettings {
  return { w: call.w, wtimeoutMS: call.timeout };
}

/**
 * Runs `operation` and settles within `ms`: the driver's promise keeps running if the deadline
 * fires first, but its late outcome is observed (no unhandled rejection) and dropped.
 */
export async function withDeadline<T>(name: string, ms: number, operation: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const pending = operation();
  pending.catch(() => undefined);
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceededError(name, ms)), ms);
  });
  try {
    return await Promise.race([pending, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
