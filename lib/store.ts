import type { Collection, Document, UpdateFilter, WriteConcernSettings } from 'mongodb';
import type { ResolvedCallOptions } from './options';

/** A database call that outlived its `timeout`: the client-side deadline fired first. */
export class DeadlineExceededError extends Error {
  override readonly name = 'DeadlineExceededError';

  constructor(operation: string, ms: number) {
    super(`${operation} did not settle within ${ms} ms`);
  }
}

/** What `inspect` read: the document's lock property, and the server's clock at that moment. */
export interface Inspection {
  readonly doc: Document | null;
  /** The server's `$$NOW`; undefined when no document matched. */
  readonly serverNow: Date | undefined;
  /** Local time at which the reply arrived. */
  readonly arrivedAt: number;
}

const SERVER_NOW = '__monglockServerNow';

/**
 * The only module that talks to the driver. Every call is bounded by `timeout` three ways:
 * `maxTimeMS` on the server, `wtimeoutMS` for the write concern, and a client-side deadline that
 * settles the promise even when the server is unreachable.
 */
export class Store {
  constructor(
    readonly collection: Collection<Document>,
    readonly field: string,
    protected readonly localNow: () => number,
  ) {}

  /** One atomic update of the first matching document; resolves its lock property after the update, or null. */
  findOneAndUpdate(
    filter: Document,
    update: Document,
    call: ResolvedCallOptions,
    arrayFilters?: Document[],
  ): Promise<Document | null> {
    return withDeadline('findOneAndUpdate', call.timeout, () =>
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

  /** Reads the first document matching `filter` (its lock property only) and the server's clock. */
  async inspect(filter: Document, call: ResolvedCallOptions): Promise<Inspection> {
    const docs = await withDeadline('aggregate', call.timeout, () =>
      this.collection
        .aggregate([{ $match: filter }, { $limit: 1 }, { $project: { [this.field]: 1, [SERVER_NOW]: '$$NOW' } }], {
          maxTimeMS: call.timeout,
        })
        .toArray(),
    );
    const arrivedAt = this.localNow();
    const doc = docs[0] ?? null;
    const serverNow: unknown = doc?.[SERVER_NOW];
    return { doc, serverNow: serverNow instanceof Date ? serverNow : undefined, arrivedAt };
  }
}

/** The extra calls resource locks make, on their own lock collection. */
export class ResourceStore extends Store {
  /** Inserts `doc` for the filter's equality fields unless a document matches; resolves whether it inserted. */
  async insertIfMissing(filter: Document, doc: Document, call: ResolvedCallOptions): Promise<boolean> {
    try {
      const result = await withDeadline('updateOne', call.timeout, () =>
        this.collection.updateOne(filter, { $setOnInsert: doc }, { upsert: true, maxTimeMS: call.timeout, writeConcern: writeConcern(call) }),
      );
      return result.upsertedCount > 0;
    } catch (error) {
      if ((error as { code?: unknown }).code === 11000) return false; // created concurrently
      throw error;
    }
  }

  /** The server's clock, read by stamping a meta document (which exists even in an empty collection). */
  async serverTime(metaId: string, call: ResolvedCallOptions): Promise<{ serverNow: Date; arrivedAt: number }> {
    const doc = await withDeadline('findOneAndUpdate', call.timeout, () =>
      this.collection.findOneAndUpdate({ _id: metaId as never }, { $currentDate: { now: true } }, {
        upsert: true,
        returnDocument: 'after',
        maxTimeMS: call.timeout,
        writeConcern: writeConcern(call),
      }),
    );
    const arrivedAt = this.localNow();
    const serverNow: unknown = doc?.now;
    if (!(serverNow instanceof Date)) throw new Error('The server did not return its time');
    return { serverNow, arrivedAt };
  }

  /** Every document matching `filter`, with the server's clock at the time of the read. */
  async readAll(filter: Document, call: ResolvedCallOptions): Promise<{ docs: Document[]; serverNow: Date | undefined }> {
    const docs = await withDeadline('aggregate', call.timeout, () =>
      this.collection.aggregate([{ $match: filter }, { $addFields: { [SERVER_NOW]: '$$NOW' } }], { maxTimeMS: call.timeout }).toArray(),
    );
    const serverNow: unknown = docs[0]?.[SERVER_NOW];
    return { docs, serverNow: serverNow instanceof Date ? serverNow : undefined };
  }

  /** One atomic update of the document matching `filter`, resolving it as it was before (or null). */
  async updateReturningBefore(filter: Document, update: Document, call: ResolvedCallOptions): Promise<Document | null> {
    return withDeadline('findOneAndUpdate', call.timeout, () =>
      this.collection.findOneAndUpdate(filter, update as UpdateFilter<Document>, {
        returnDocument: 'before',
        maxTimeMS: call.timeout,
        writeConcern: writeConcern(call),
      }),
    );
  }

  /** Updates every matching document; resolves how many changed. */
  async updateMany(filter: Document, update: Document, call: ResolvedCallOptions): Promise<number> {
    const result = await withDeadline('updateMany', call.timeout, () =>
      this.collection.updateMany(filter, update as UpdateFilter<Document>, { maxTimeMS: call.timeout, writeConcern: writeConcern(call) }),
    );
    return result.modifiedCount;
  }

  /** Deletes every matching document; resolves how many. */
  async deleteMany(filter: Document, call: ResolvedCallOptions): Promise<number> {
    const result = await withDeadline('deleteMany', call.timeout, () =>
      this.collection.deleteMany(filter, { maxTimeMS: call.timeout, writeConcern: writeConcern(call) }),
    );
    return result.deletedCount;
  }

  /** Creates indexes; resolves their names. */
  createIndexes(indexes: Array<{ key: Document; name: string; unique?: boolean; expireAfterSeconds?: number }>, call: ResolvedCallOptions): Promise<string[]> {
    return withDeadline('createIndexes', call.timeout, () => this.collection.createIndexes(indexes, { maxTimeMS: call.timeout }));
  }
}

function writeConcern(call: ResolvedCallOptions): WriteConcernSettings {
  return { w: call.w, wtimeoutMS: call.timeout };
}

/**
 * Runs `operation` and settles within `ms`: the driver's promise keeps running if the deadline
 * fires first, but its late outcome is observed (no unhandled rejection) and dropped.
 */
async function withDeadline<T>(name: string, ms: number, operation: () => Promise<T>): Promise<T> {
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
