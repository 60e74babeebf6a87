import type { Collection, Document } from 'mongodb';
import { wrapWrites } from '../../stress/server-faults';
import { realNow } from './clock';

/** `collection` on a shard whose primary's clock is the server's plus `offsetMs()`: each `$currentDate` it applies writes that time. */
export function onShardClock(collection: Collection<Document>, offsetMs: () => number): Collection<Document> {
  const shardTime = (update: Document): Document => {
    const { $currentDate, ...rest } = update as { $currentDate?: Document; $set?: Document };
    if (!$currentDate) return update;
    const now = new Date(realNow() + offsetMs());
    return { ...rest, $set: { ...rest.$set, ...Object.fromEntries(Object.keys($currentDate).map((path) => [path, now])) } };
  };
  return wrapWrites(collection, (method, args, _n, send) =>
    method === 'findOneAndUpdate' || method === 'updateOne' ? send([args[0], shardTime(args[1] as Document), ...args.slice(2)]) : send(args),
  );
}
