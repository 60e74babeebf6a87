/**
 * The floors: what an acquire + release costs without a lock library, each sent through the bare
 * driver. None excludes anyone; they are what a lock's two commands cost at the least.
 * - two majority writes: what the peers pay (a findOneAndUpdate per acquire and per release);
 * - monglock's write concerns: the same simple commands, the acquisition at majority and the
 *   release at `w: 1`, as monglock sends them;
 * - monglock's exact commands: the findOneAndUpdate and updateOne monglock sends for one
 *   acquire + release, recorded once per resource and sent again with their time stamps moved to
 *   now: the server's cost of monglock's commands without the library's code around them;
 * - a monglock-shaped filter: a simple update under a filter shaped as monglock's, for servers
 *   whose cost depends on the filter's shape.
 */
import type { Collection, Document } from 'mongodb';
import type * as Monglock from '../lib';
import type { Contender, Release } from './contenders';

type Insert = (collection: Collection<Document>, resources: readonly string[]) => Promise<void>;
type Args = Parameters<Collection<Document>['findOneAndUpdate']>;
type UpdateArgs = Parameters<Collection<Document>['updateOne']>;

/** `value` with every Date in it `ms` later (a recorded command's stamps, made current). */
export function shifted<T>(value: T, ms: number): T {
  if (value instanceof Date) return new Date(value.getTime() + ms) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => shifted(item, ms)) as T;
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, shifted(item, ms)])) as T;
  }
  return value;
}

/** The findOneAndUpdate and updateOne monglock sends for one acquire + release of `resource`, and when they were sent (local ms). */
export async function recordExact(collection: Collection<Document>, resource: unknown, writeLock: typeof Monglock.writeLock, lease: number): Promise<{ acquire: Args; release: UpdateArgs; at: number }> {
  const sent: { findOneAndUpdate?: unknown[]; updateOne?: unknown[] } = {};
  const recording = new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (property === 'findOneAndUpdate' || property === 'updateOne') sent[property] = args;
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  const lock = writeLock({ collection: recording, locktimeout: lease });
  await (await lock.acquire({ _id: resource as never })).release(); // the first call learns the server's clock
  const at = Date.now();
  await (await lock.acquire({ _id: resource as never })).release();
  if (!sent.findOneAndUpdate || !sent.updateOne) throw new Error('monglock sent no findOneAndUpdate or updateOne');
  return { acquire: sent.findOneAndUpdate as Args, release: sent.updateOne as UpdateArgs, at };
}

/** The floors, on collections of the run. */
export function floors(insert: Insert, writeLock: typeof Monglock.writeLock, lease: number): Contender[] {
  const list: Contender[] = [];
  /** A floor whose acquire and release are each one command on `resource`. */
  interface FloorSpec extends Pick<Contender, 'name' | 'writeConcern' | 'note'> {
    readonly record?: (collection: Collection<Document>, resources: readonly string[]) => Promise<void>;
    readonly acquire: (collection: Collection<Document>, resource: string) => Promise<unknown>;
    readonly release: (collection: Collection<Document>, resource: string) => Promise<unknown>;
    /** Its read-modify-write: a read and a write of the data document, no lock. */
    readonly withReadModifyWrite?: boolean;
  }
  const floor = ({ record, acquire, release, withReadModifyWrite, ...shown }: FloorSpec): Contender => {
    let collection: Collection<Document> | undefined;
    let data: Collection<Document> | undefined;
    const tryLock = async (resource: string): Promise<Release> => {
      await acquire(collection!, resource);
      return async () => void (await release(collection!, resource));
    };
    return {
      ...shown,
      kind: 'floor',
      async prepare(target, resources, dataCollection) {
        await insert(target, resources);
        collection = target;
        data = dataCollection;
        await record?.(target, resources);
      },
      tryLock,
      lock: tryLock,
      readModifyWrite: withReadModifyWrite
        ? async (resource) => {
            const doc = await data!.findOne({ _id: resource as never });
            await data!.updateOne({ _id: resource as never }, { $set: { n: ((doc?.n as number | undefined) ?? 0) + 1 } }, { writeConcern: { w: 'majority' } });
          }
        : undefined,
    };
  };
  const majority = { writeConcern: { w: 'majority' as const } };
  list.push(
    floor({
      name: 'floor: findOneAndUpdate',
      writeConcern: 'majority',
      note: 'a bare findOneAndUpdate (w: majority) per "acquire" and per "release", no exclusion: the least any lock can cost, what the peers pay',
      acquire: (collection, resource) => collection.findOneAndUpdate({ _id: resource as never }, { $inc: { n: 1 } }, majority),
      release: (collection, resource) => collection.findOneAndUpdate({ _id: resource as never }, { $inc: { n: 1 } }, majority),
      withReadModifyWrite: true,
    }),
    floor({
      name: "floor: monglock's write concerns",
      writeConcern: 'acquire majority, release 1',
      note: 'a bare findOneAndUpdate at majority per "acquire" and an updateOne at w: 1 per "release": the write concerns monglock sends, with the simplest commands',
      acquire: (collection, resource) => collection.findOneAndUpdate({ _id: resource as never }, { $inc: { n: 1 } }, majority),
      release: (collection, resource) => collection.updateOne({ _id: resource as never }, { $inc: { n: 1 } }, { writeConcern: { w: 1 } }),
    }),
  );
  const recorded = new Map<string, { acquire: Args; release: UpdateArgs; at: number }>();
  list.push(
    floor({
      name: "floor: monglock's exact commands",
      writeConcern: 'acquire majority, release 1',
      note: "the findOneAndUpdate and updateOne monglock sends for an acquire + release, recorded and sent again through the bare driver (stamps moved to now): the server's cost of monglock's commands, without its code",
      async record(collection, resources) {
        recorded.clear();
        for (const resource of resources.slice(0, 16)) recorded.set(resource, await recordExact(collection, resource, writeLock, lease));
      },
      acquire: async (collection, resource) => {
        const exact = recorded.get(resource)!;
        const reply = await collection.findOneAndUpdate(...shifted(exact.acquire, Date.now() - exact.at));
        if (!reply) throw new Error(`monglock's recorded acquisition of ${resource} matched nothing when sent again`);
      },
      release: (collection, resource) => collection.updateOne(...recorded.get(resource)!.release),
    }),
  );
  // A filter shaped as monglock's acquisition (an `$and` beside `_id`, `$elemMatch`, `$expr`).
  const shapedFilter = (resource: string): Document => ({
    _id: resource,
    $and: [{ 'lock.tags.write': { $not: { $elemMatch: { exp: { $gt: new Date() } } } } }, { $expr: { $lte: [new Date(0), '$$NOW'] } }],
  });
  list.push(
    floor({
      name: 'floor, monglock-shaped filter',
      writeConcern: 'majority',
      note: "the two-majority floor with a filter shaped as monglock's (`_id` plus `$and`, `$elemMatch`, `$expr`): what the backend charges for the shape alone",
      acquire: (collection, resource) => collection.findOneAndUpdate(shapedFilter(resource), { $inc: { n: 1 } }, majority),
      release: (collection, resource) => collection.findOneAndUpdate(shapedFilter(resource), { $inc: { n: 1 } }, majority),
    }),
  );
  return list;
}
