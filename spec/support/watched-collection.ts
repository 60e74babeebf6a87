import type { ChangeStream, Collection, Document, MongoClient } from 'mongodb';

/**
 * `collection` seen through `client` (another "process" for the library: a change feed of its
 * own), with every change stream it opens handed to `opened`, which may record or wrap it.
 */
export function watchedCollection(client: MongoClient, collection: Collection<Document>, opened: (stream: ChangeStream) => ChangeStream): Collection<Document> {
  const plain = client.db(collection.dbName).collection(collection.collectionName);
  return new Proxy(plain, {
    get(target, key) {
      if (key === 'watch') return (...args: Parameters<Collection<Document>['watch']>) => opened(target.watch(...args));
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
