/**
 * A sharded cluster simulated on one server, at the places where a real one differs (test
 * infrastructure; docs/backends.md says what only the manual vouches for):
 *
 * - **Routers with clocks of their own.** mongos sets `$$NOW` for every command it routes (a
 *   runtime constant forwarded to the shard), while `$currentDate` is the clock of the shard's
 *   primary that applies a write. Each simulated router rewrites every `$$NOW` it forwards (in
 *   filters, `$expr`, update pipelines, projections and aggregations) into its own clock's time,
 *   fixed when the command is sent, and leaves `$currentDate` to the server, whose clock plays the
 *   shard's. A driver spreads commands over the routers of its seed list: `pick` chooses one per
 *   command.
 * - **Shard-key routing (mongos 4.4–6.x).** A findAndModify, and an upsert, without an equality on
 *   the whole shard key is refused (code 61, ShardKeyNotFound); an updateOne or deleteOne without an
 *   equality on `_id` or on the whole shard key is refused (code 72, InvalidOptions).
 * - **The cluster's metadata.** `hello` answers `msg: 'isdbgrid'`, and `config.collections` holds
 *   the collection's shard key.
 */
import { MongoServerError, type Collection, type Document } from 'mongodb';

/** A simulated mongos: its clock is the server's plus `offsetMs` (a number, or read per command: a clock that steps). */
export interface SimulatedRouter {
  readonly offsetMs: number | (() => number);
}

/** What the simulated cluster looks like. */
export interface ClusterOptions {
  readonly routers: readonly SimulatedRouter[];
  /** Which router serves the `n`-th command (0-based) of this collection; round robin by default. */
  readonly pick?: (n: number, method: string) => number;
  /** The collection's shard key pattern (`{ region: 1, _id: 1 }`); `{ _id: 1 }` by default. */
  readonly shardKey?: Readonly<Record<string, unknown>>;
  /** Refuse writes without the shard key, as mongos 4.4–6.x does (7.0+ broadcasts them). @default true */
  readonly requireShardKey?: boolean;
  /** Told of every write refused for want of the shard key. */
  readonly onRefusal?: (method: string, error: MongoServerError) => void;
  /**
   * False: no mongos, no shard key, `hello` as the server says: one "router" then stands for a
   * replica set's primary whose `$$NOW` is stepped (after a failover to a member whose clock is
   * behind), with `$currentDate` left on the server's clock. @default true
   */
  readonly sharded?: boolean;
  /**
   * What reading `config.collections` answers for the namespace asked (the promise the caller
   * awaits, as it is): by default the collection's shard key (`{ _id, key }`) for its own namespace,
   * null for others. {@link metadataUnauthorized} is what a user without the privilege is answered.
   */
  readonly shardKeyAnswer?: (namespace: string) => Promise<Document | null>;
}

/** The error (13 Unauthorized) of a read of `config.collections` by a user without the privilege. */
export function metadataUnauthorized(): MongoServerError {
  return new MongoServerError({ ok: 0, code: 13, codeName: 'Unauthorized', errmsg: 'not authorized on config to execute command { find: "collections" } (simulated)' });
}

/** The server's clock (the test server runs on this machine): the shard's clock in the simulation. */
const serverNow = (): number => performance.timeOrigin + performance.now();

/** The clock of `router` now, in ms. */
export function routerNow(router: SimulatedRouter): number {
  return serverNow() + (typeof router.offsetMs === 'function' ? router.offsetMs() : router.offsetMs);
}

/** `value` with every `'$$NOW'` replaced by `now` (plain objects and arrays only: BSON values are left as they are). */
export function withNowFixed(value: unknown, now: Date): unknown {
  if (value === '$$NOW') return now;
  if (Array.isArray(value)) return value.map((item) => withNowFixed(item, now));
  if (typeof value !== 'object' || value === null) return value;
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) return value;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, withNowFixed(item, now)]));
}

/** Methods whose arguments may carry `$$NOW` and are routed: every argument is rewritten. */
const ROUTED = new Set(['findOneAndUpdate', 'findOneAndDelete', 'updateOne', 'updateMany', 'deleteOne', 'deleteMany', 'find', 'findOne', 'aggregate', 'countDocuments']);

/** The collection as a client of the simulated cluster sees it (same server, same data). */
export function simulatedCluster(collection: Collection<Document>, options: ClusterOptions): Collection<Document> {
  const shardKey = options.shardKey ?? { _id: 1 };
  const fields = Object.keys(shardKey);
  const sharded = options.sharded ?? true;
  const requireKey = sharded && (options.requireShardKey ?? true);
  let commands = 0;
  const db = sharded ? clusterDb(collection, shardKey, options.shardKeyAnswer) : collection.db;
  return new Proxy(collection, {
    get(target, property, receiver) {
      if (property === 'db') return db;
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (!ROUTED.has(method)) return (value as (...a: unknown[]) => unknown).bind(target);
      return (...args: unknown[]) => {
        const router = options.routers[(options.pick ?? ((n) => n % options.routers.length))(commands++, method)]!;
        if (requireKey) {
          const refusal = shardKeyRefusal(method, args, fields);
          if (refusal) {
            options.onRefusal?.(method, refusal);
            return Promise.reject(refusal);
          }
        }
        const now = new Date(routerNow(router));
        return (value as (...a: unknown[]) => unknown).apply(target, args.map((arg) => withNowFixed(arg, now)));
      };
    },
  });
}

/** The refusal mongos 4.4–6.x answers a write without the shard key with, if it does. */
function shardKeyRefusal(method: string, args: readonly unknown[], fields: readonly string[]): MongoServerError | undefined {
  const filter = (args[0] ?? {}) as Document;
  const options = (method === 'findOneAndUpdate' || method.startsWith('update') ? args[2] : args[1]) as Document | undefined;
  const named = (path: string): boolean => equalityOn(filter, path);
  const wholeKey = fields.every(named);
  if (method === 'findOneAndUpdate' || method === 'findOneAndDelete' || options?.upsert) {
    if (!wholeKey) return new MongoServerError({ ok: 0, code: 61, codeName: 'ShardKeyNotFound', errmsg: `Query for sharded findAndModify must contain the shard key (simulated mongos; key ${fields.join(', ')})` });
  }
  if ((method === 'updateOne' || method === 'deleteOne') && !wholeKey && !named('_id')) {
    return new MongoServerError({
      ok: 0,
      code: 72,
      codeName: 'InvalidOptions',
      errmsg: `A single ${method === 'updateOne' ? 'update' : 'delete'} on a sharded collection must contain an exact match on _id or contain the shard key (simulated mongos; key ${fields.join(', ')})`,
    });
  }
  return undefined;
}

/** True when `filter` (or a clause of its top-level `$and`) holds an equality on `path`, as mongos extracts a shard key. */
function equalityOn(filter: Document, path: string): boolean {
  const condition: unknown = filter[path];
  if (condition !== undefined) {
    if (typeof condition !== 'object' || condition === null) return true;
    const keys = Object.keys(condition);
    return !keys.some((key) => key.startsWith('$')) || (keys.length === 1 && keys[0] === '$eq');
  }
  return Array.isArray(filter.$and) && (filter.$and as Document[]).some((clause) => equalityOn(clause, path));
}

/** The collection's database as seen through mongos: `hello` says so, and the config database knows the shard key. */
function clusterDb(collection: Collection<Document>, shardKey: Readonly<Record<string, unknown>>, shardKeyAnswer?: ClusterOptions['shardKeyAnswer']): Collection<Document>['db'] {
  const real = collection.db;
  const namespace = `${collection.dbName}.${collection.collectionName}`;
  const answer = shardKeyAnswer ?? ((asked: string) => Promise.resolve(asked === namespace ? { _id: namespace, key: shardKey } : null));
  const config = {
    collection: (name: string) => ({
      findOne: (query: Document): Promise<Document | null> => (name === 'collections' ? answer(String(query._id)) : Promise.resolve(null)),
    }),
  };
  const client = new Proxy(real.client, {
    get(target, property, receiver) {
      if (property === 'db') return (name: string, options?: Document) => (name === 'config' ? config : target.db(name, options));
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return new Proxy(real, {
    get(target, property, receiver) {
      if (property === 'client') return client;
      if (property === 'command') {
        return async (command: Document, options?: Document) => {
          const reply = await target.command(command, options);
          return 'hello' in command || 'isMaster' in command || 'ismaster' in command ? { ...reply, msg: 'isdbgrid' } : reply;
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
