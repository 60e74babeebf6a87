import type { Collection, Document } from 'mongodb';

type Callback = (error: unknown, result?: unknown) => void;

/**
 * Makes a driver-6 collection look like a driver-3 one to the two peers written for it
 * (andrasq's mongo-lock, chilts' mongodb-lock): the callback forms of `insert`, `update`,
 * `remove`, `findOne`, `insertOne`, `findOneAndUpdate`, `findOneAndDelete`, `createIndexes`, with
 * driver-3 result shapes. Each call is still exactly one command: the adapter only translates,
 * and passes on the write concern a call gives (driver 3's `{ w: 1 }`), unless `forceW` replaces
 * every write's.
 */
export function callbackCollection(collection: Collection<Document>, forceW?: 'majority' | number): Record<string, (...args: unknown[]) => void> {
  const concern = (options: unknown): { writeConcern?: { w: 'majority' | number } } => {
    const w = forceW ?? (options as { w?: 'majority' | number } | undefined)?.w;
    return w === undefined ? {} : { writeConcern: { w } };
  };
  const call = (promise: Promise<unknown>, callback: unknown, shape: (result: unknown) => unknown = (r) => r): void => {
    promise.then(
      (result) => (callback as Callback)(null, shape(result)),
      (error: unknown) => (callback as Callback)(error),
    );
  };
  const last = (args: unknown[]): Callback => args[args.length - 1] as Callback;
  return {
    insert: (doc, ...rest) => call(collection.insertOne({ ...(doc as Document) }, concern(rest.length > 1 ? rest[0] : undefined)), last(rest)),
    update: (filter, update, options, ...rest) =>
      call(collection.updateOne(filter as Document, update as Document, { upsert: Boolean((options as { upsert?: boolean })?.upsert), ...concern(options) }), last(rest)),
    remove: (filter, ...rest) => call(collection.deleteOne(filter as Document, concern(rest.length > 1 ? rest[0] : undefined)), last(rest)),
    findOne: (filter, ...rest) => call(collection.findOne(filter as Document), last(rest)),
    insertOne: (doc, ...rest) => call(collection.insertOne({ ...(doc as Document) }, concern(rest.length > 1 ? rest[0] : undefined)), last(rest), () => ({ ops: [doc] })),
    findOneAndUpdate: (filter, update, ...rest) =>
      call(collection.findOneAndUpdate(filter as Document, update as Document, { includeResultMetadata: true, ...concern(rest.length > 1 ? rest[0] : undefined) }), last(rest)),
    findOneAndDelete: (filter, ...rest) =>
      call(collection.findOneAndDelete(filter as Document, { includeResultMetadata: true, ...concern(rest.length > 1 ? rest[0] : undefined) }), last(rest)),
    createIndexes: (indexes, options, ...rest) =>
      call(collection.createIndexes((indexes as Array<{ key: Document }>).map((index) => ({ ...index, ...(options as object) }))), last(rest)),
  };
}
