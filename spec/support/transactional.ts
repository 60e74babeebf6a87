/**
 * A collection that plays the caller's transaction for the specs (no backend here runs one: the
 * offline server has no sessions). It records the session and write concern of every call and
 * forwards it without the session; a transaction that aborts is simulated by not applying the
 * writes made in it. As MongoDB does, it holds a write outside the transaction while a transaction
 * that wrote is open, until it ends or the write's `maxTimeMS` passes (then code 50). What MongoDB
 * then does is the manual's (docs/backends.md).
 */
import { MongoServerError, type AggregationCursor, type ClientSession, type Collection, type Document } from 'mongodb';
import { realNow } from './clock';
import { liveEntries as entriesLive } from './lock-commands';
import { mongoClient, sleep } from './fixture';

/** One driver call as monglock made it. */
export interface Call {
  readonly method: string;
  readonly inTransaction: boolean;
  readonly session: boolean;
  readonly w: unknown;
  /** The read concern level of a read. */
  readonly readConcern?: unknown;
  /** Its reply (or error) came. */
  settled?: true;
}

/** What happens to a write made in the transaction: applied (it commits), undone at once (it aborts), or failed with an error. */
export type InTransaction = 'commit' | 'abort' | (() => Error);

/** `collection` whose calls are recorded and forwarded without their session (see the file's comment). */
export function transactional(collection: Collection<Document>, calls: Call[], inTransaction: () => InTransaction): Collection<Document> {
  /** The transactions that wrote: a write outside them waits while one is open. */
  const writers = new Set<ClientSession>();
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (!['findOneAndUpdate', 'updateOne', 'aggregate'].includes(method)) return (value as (...a: unknown[]) => unknown).bind(target);
      return (...args: unknown[]) => {
        const at = method === 'aggregate' ? 1 : 2;
        const { session, ...options } = (args[at] ?? {}) as { session?: ClientSession; writeConcern?: { w?: unknown }; readConcern?: { level?: unknown }; maxTimeMS?: number };
        const inside = session?.inTransaction() === true;
        const call: Call = { method, inTransaction: inside, session: session !== undefined, w: options.writeConcern?.w, readConcern: options.readConcern?.level };
        calls.push(call);
        const send = (): unknown => (value as (...a: unknown[]) => unknown).apply(target, [...args.slice(0, at), options]);
        if (method === 'aggregate') return settledOnRead(send() as AggregationCursor, call); // a cursor, as the driver returns
        const forward = send as () => Promise<unknown>;
        return (async () => {
          try {
            if (inside) {
              const fate = inTransaction();
              if (fate !== 'commit' && fate !== 'abort') throw fate();
              writers.add(session);
              if (fate === 'abort') return await undone(target, forward);
            } else await behind(writers, options.maxTimeMS ?? 60_000);
            return await forward();
          } finally {
            call.settled = true;
          }
        })();
      };
    },
  });
}

/** `cursor`, whose `toArray` marks `call` settled when its documents came. */
function settledOnRead(cursor: AggregationCursor, call: Call): AggregationCursor {
  const toArray = cursor.toArray.bind(cursor);
  cursor.toArray = () => toArray().finally(() => (call.settled = true));
  return cursor;
}

/** Waits while a transaction of `writers` is open, at most `maxTimeMS` (then fails as MongoDB does). */
async function behind(writers: Set<ClientSession>, maxTimeMS: number): Promise<void> {
  const deadline = realNow() + maxTimeMS;
  const open = (): boolean => [...writers].some((writer) => writer.inTransaction());
  while (open() && realNow() < deadline) await sleep(10);
  if (open()) throw new MongoServerError({ ok: 0, code: 50, codeName: 'MaxTimeMSExpired', errmsg: 'operation exceeded time limit (simulated: held behind the open transaction that wrote the document)' });
}

/** Runs `write`, then puts the collection back as it was: what a transaction that aborts leaves (outside writes wait meanwhile). */
async function undone<T>(collection: Collection<Document>, write: () => Promise<T>): Promise<T> {
  const before = await collection.find({}).toArray();
  try {
    return await write();
  } finally {
    await collection.deleteMany({});
    if (before.length > 0) await collection.insertMany(before);
  }
}

export { until } from './lock-commands';

/** How many unexpired lock entries (of every tag) the document `_id` holds: {@link entriesLive}, counted. */
export async function liveEntries(collection: Collection<Document>, id: unknown): Promise<number> {
  return (await entriesLive(collection, id)).length;
}

/** A session with a transaction started before each test (by hand: what `withTransaction` does around its callback), ended after it. */
export function transactionPerTest(): () => ClientSession {
  let session: ClientSession;
  beforeEach(() => {
    session = mongoClient().startSession();
    session.startTransaction();
  });
  afterEach(async () => {
    if (session.inTransaction()) await session.abortTransaction().catch(() => undefined);
    await session.endSession().catch(() => undefined);
  });
  return () => session;
}
