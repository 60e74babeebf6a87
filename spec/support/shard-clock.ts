import type { Collection, Document } from 'mongodb';
import { realNow } from './clock';

/** `collection` on a shard whose primary's clock is the server's plus `offsetMs()`: each `$currentDate` it applies writes that time. */
export function onShardClock(collection: Collection<Document>, offsetMs: () => number): Collection<Document> {
  const shardTime = (update: Document): Document => {
    const { $currentDate, ...rest } = update as { $currentDate?: Document; $set?: Document };
    if (!$currentDate) return update;
    const now = new Date(realNow() + offsetMs());
    return { ...rest, $set: { ...rest.$set, ...Object.fromEntries(Object.keys($currentDate).map((path) => [path, now])) } };
  };
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = value as (...a: unknown[]) => unknown;
      if (property !== 'findOneAndUpdate' && property !== 'updateOne') return method.bind(target);
      return (filter: Document, update: Document, ...rest: unknown[]) => method.call(target, filter, shardTime(update), ...rest);
    },
  });
}
