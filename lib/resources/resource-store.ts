import type { Document, UpdateFilter } from 'mongodb';
import type { ResolvedCallOptions } from '../common/options';
import type { LockOperation } from '../protocol/operation';
import { clockReadOperation } from '../protocol/resource-document';
import { SERVER_NOW, Store, withDeadline, writeConcern, type Timed } from '../engine/store';

/**
 * The calls resource locks make on their own lock collection, besides the engine's. A resource
 * document is keyed by `_id: <resource name>` (a string), so MongoDB's own unique `_id` index
 * makes two documents for one resource impossible, whether or not `createIndexes()` ran.
 */
export class ResourceStore extends Store {
  /** Sends {@link createResourceOperation} (an upsert); resolves whether it created the document. */
  async ensureResource(operation: LockOperation, call: ResolvedCallOptions): Promise<boolean> {
    try {
      const result = await this.send('updateOne', call, (sent) =>
        this.collection.updateOne(operation.filter, operation.update as UpdateFilter<Document>, { upsert: true, maxTimeMS: sent.timeout, writeConcern: writeConcern(sent) }),
        [operation.filter, operation.update],
      );
      return result.upsertedCount > 0;
    } catch (error) {
      if (isDuplicateId(error)) return false; // it exists (with its birth time), or was created concurrently
      throw error; // another unique index refused it: not ours to ignore
    }
  }

  /**
   * The server's clock, read by stamping a meta document whose `_id` (an object) can never be a
   * resource's name; it exists even in an empty collection.
   */
  async serverTime(metaId: Document, call: ResolvedCallOptions): Promise<Timed<Date>> {
    const clockReading = clockReadOperation(metaId);
    const reply = await this.timed('findOneAndUpdate', call, (sent) =>
      this.collection.findOneAndUpdate(clockReading.filter, clockReading.update, {
        upsert: true,
        returnDocument: 'after',
        maxTimeMS: sent.timeout,
        writeConcern: writeConcern(sent),
      }),
      [clockReading.filter, clockReading.update],
    );
    const serverNow: unknown = reply.value?.now;
    if (!(serverNow instanceof Date)) throw new Error('The server did not return its time');
    return { ...reply, value: serverNow };
  }

  /** Every document matching `filter`, with the server's clock at the time of the read, on the primary. */
  async readAll(filter: Document, call: ResolvedCallOptions): Promise<{ docs: Document[]; serverNow: Date | undefined }> {
    const docs = await this.send('aggregate', call, (sent) =>
      this.collection
        .aggregate([{ $match: filter }, { $addFields: { [SERVER_NOW]: '$$NOW' } }], { maxTimeMS: sent.timeout, readPreference: 'primary' })
        .toArray(),
      [filter],
    );
    const serverNow: unknown = docs[0]?.[SERVER_NOW];
    return { docs, serverNow: serverNow instanceof Date ? serverNow : undefined };
  }

  /** One atomic update of the document matching `filter`, resolving it as it was before (or null). */
  async updateReturningBefore(operation: LockOperation, call: ResolvedCallOptions): Promise<Document | null> {
    return this.send('findOneAndUpdate', call, (sent) =>
      this.collection.findOneAndUpdate(operation.filter, operation.update as UpdateFilter<Document>, {
        returnDocument: 'before',
        maxTimeMS: sent.timeout,
        writeConcern: writeConcern(sent),
      }),
      [operation.filter, operation.update],
    );
  }

  /** Sends `operation` as an `updateMany`; resolves how many documents changed. */
  async updateMany(operation: LockOperation, call: ResolvedCallOptions): Promise<number> {
    const result = await this.send('updateMany', call, (sent) =>
      this.collection.updateMany(operation.filter, operation.update as UpdateFilter<Document>, { maxTimeMS: sent.timeout, writeConcern: writeConcern(sent) }),
      [operation.filter, operation.update],
    );
    return result.modifiedCount;
  }

  /** Deletes every matching document; resolves how many. */
  async deleteMany(filter: Document, call: ResolvedCallOptions): Promise<number> {
    const result = await this.send('deleteMany', call, (sent) =>
      this.collection.deleteMany(filter, { maxTimeMS: sent.timeout, writeConcern: writeConcern(sent) }),
      [filter],
    );
    return result.deletedCount;
  }

  /** Creates indexes; resolves their names. */
  createIndexes(indexes: Array<{ key: Document; name: string; unique?: boolean; expireAfterSeconds?: number; partialFilterExpression?: Document }>, call: ResolvedCallOptions): Promise<string[]> {
    return withDeadline('createIndexes', call.timeout, () => this.collection.createIndexes(indexes, { maxTimeMS: call.timeout }));
  }
}

/**
 * A duplicate-key refusal on `_id` (code 11000 on mongod; some compatible engines say it only in
 * the message). One on another unique index is a different problem and is not swallowed.
 */
function isDuplicateId(error: unknown): boolean {
  const { code, message, keyPattern } = (error ?? {}) as { code?: unknown; message?: unknown; keyPattern?: unknown };
  const text = typeof message === 'string' ? message : '';
  if (code !== 11000 && !/duplicate key/i.test(text)) return false;
  if (typeof keyPattern === 'object' && keyPattern !== null) return Object.keys(keyPattern).join() === '_id';
  return /index: _id_ |_id_ dup key|dup key: \{ _id:/.test(text);
}
