import type { ClientSession, Collection, Document, UpdateFilter, WriteConcernSettings } from 'mongodb';
import type { LockOperation } from '../protocol/operation';
import type { ResolvedCallOptions } from '../common/options';
import { inTransaction } from '../common/write-params';
import { LockPaths } from '../protocol/stored-format';
import { replyProjection, withShardKey } from './reply-projection';

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
  private readonly paths: LockPaths;
  /** The shard key fields a locked document is addressed by, with its `_id` (set once the deployment is known): every reply projects them. */
  #shardKey: readonly string[] = [];

  constructor(
    readonly collection: Collection<Document>,
    readonly field: string,
    protected readonly localNow: () => number,
  ) {
    this.paths = new LockPaths(field);
  }

  /** The shard key fields that replies carry, so that the locked document can be addressed by them. */
  get shardKey(): readonly string[] {
    return this.#shardKey;
  }

  set shardKey(fields: readonly string[]) {
    this.#shardKey = fields;
  }

  /**
   * One atomic update of the first matching document; resolves it after the update (its lock
   * property and `_id`, or what `document` asks for besides), or null.
   */
  findOneAndUpdate(
    filter: Document,
    update: Document,
    call: ResolvedCallOptions,
    arrayFilters?: Document[],
    document?: Document | true,
    w: ResolvedCallOptions['w'] = call.w,
  ): Promise<Timed<Document | null>> {
    return this.sendFindAndModify(filter, update, call, arrayFilters, this.projection(document), w);
  }

  /**
   * Sends `operation` as a `findOneAndUpdate` whose reply holds only the lock's fencing counter and
   * the server's clock (`fence`, `born`, `now`): all that an exclusive acquisition without
   * assertive tags reads back (a narrower projection costs the server less).
   */
  applyForToken(operation: LockOperation, call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w): Promise<Timed<Document | null>> {
    return this.sendFindAndModify(operation.filter, operation.update, call, operation.arrayFilters, { projection: this.withShardKey(this.paths.token) }, w);
  }

  private sendFindAndModify(filter: Document, update: Document, call: ResolvedCallOptions, arrayFilters: Document[] | undefined, projection: { projection: Document }, w: ResolvedCallOptions['w']): Promise<Timed<Document | null>> {
    return this.timed('findOneAndUpdate', call, () =>
      this.collection.findOneAndUpdate(filter, update as UpdateFilter<Document>, {
        returnDocument: 'after',
        ...projection,
        maxTimeMS: call.timeout,
        ...writeOptions(call, w),
        ...(arrayFilters ? { arrayFilters } : {}),
      }),
    );
  }

  /** One atomic update of the first matching document, at write concern `w`; resolves whether one matched. */
  async updateOne(filter: Document, update: Document, call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w, arrayFilters?: Document[]): Promise<boolean> {
    const result = await withDeadline('updateOne', call.timeout, () =>
      this.collection.updateOne(filter, update as UpdateFilter<Document>, { maxTimeMS: call.timeout, ...writeOptions(call, w), ...(arrayFilters ? { arrayFilters } : {}) }),
    );
    return result.matchedCount > 0;
  }

  /** Sends `operation` as a `findOneAndUpdate` at write concern `w`; resolves the document after it (see {@link findOneAndUpdate}), or null. */
  apply(operation: LockOperation, call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w, document?: Document | true): Promise<Timed<Document | null>> {
    return this.findOneAndUpdate(operation.filter, operation.update, call, operation.arrayFilters, document, w);
  }

  /** Sends `operation` as an `updateOne` at write concern `w`; resolves whether it matched. */
  applyOne(operation: LockOperation, call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w): Promise<boolean> {
    return this.updateOne(operation.filter, operation.update, call, w, operation.arrayFilters);
  }

  /**
   * Reads the first document matching `filter` (its lock property only) and the server's clock, on
   * the primary; at read concern `majority` when asked (a read that a failover cannot roll back).
   */
  async inspect(filter: Document, call: ResolvedCallOptions, readConcern?: 'majority'): Promise<Inspection> {
    const reply = await this.timed('aggregate', call, () =>
      this.collection
        .aggregate([{ $match: filter }, { $limit: 1 }, { $project: { ...this.withShardKey({ [this.field]: 1 }), [SERVER_NOW]: '$$NOW' } }], {
          maxTimeMS: call.timeout,
          readPreference: 'primary',
          // Inside the caller's transaction, the read joins it (its snapshot; a read concern is the transaction's).
          ...(call.session && { session: call.session }),
          ...(readConcern && !inTransaction(call) && { readConcern: { level: readConcern } }),
        })
        .toArray(),
    );
    const doc = reply.value[0] ?? null;
    const serverNow: unknown = doc?.[SERVER_NOW];
    return { ...reply, value: doc, serverNow: serverNow instanceof Date ? serverNow : undefined };
  }

  /**
   * Sends `operations` as one `update` command of `updateOne` statements (`ordered: false`: a
   * statement that matches nothing or fails stops none of the others), at write concern `w`.
   * Resolves when the reply came; it tells only counts: which statement landed is read back.
   */
  async bulkApply(operations: readonly LockOperation[], call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w): Promise<void> {
    const statements = operations.map(({ filter, update, arrayFilters }) => ({ updateOne: { filter, update: update as UpdateFilter<Document>, ...(arrayFilters && { arrayFilters }) } }));
    await withDeadline('bulkWrite', call.timeout, () => this.collection.bulkWrite(statements, { ordered: false, maxTimeMS: call.timeout, writeConcern: writeConcern(call, w) }));
  }

  /**
   * Reads the documents whose `_id` is in `ids` (their lock property and shard key) and the
   * server's clock, in one aggregate on the primary, as {@link inspect} reads one.
   */
  async readBack(ids: readonly unknown[], call: ResolvedCallOptions): Promise<Timed<Document[]>> {
    return this.timed('aggregate', call, () =>
      this.collection
        .aggregate([{ $match: { _id: { $in: ids } } }, { $project: { ...this.withShardKey({ [this.field]: 1 }), [SERVER_NOW]: '$$NOW' } }], { maxTimeMS: call.timeout, readPreference: 'primary' })
        .toArray(),
    );
  }

  /** The `_id`s of the first two documents `filter` matches, read on the primary: enough to tell none, one or several. */
  async idsMatching(filter: Document, call: ResolvedCallOptions): Promise<unknown[]> {
    const docs = await withDeadline('find', call.timeout, () =>
      this.collection.find(filter, { projection: { _id: 1 }, limit: 2, maxTimeMS: call.timeout, readPreference: 'primary' }).toArray(),
    );
    return docs.map((doc) => doc._id);
  }

  /** The projection option of a reply for a caller's `document` option ({@link replyProjection}). */
  private projection(document: Document | true | undefined): { projection: Document } {
    return { projection: replyProjection(document, this.paths, this.#shardKey) };
  }

  /** `projection` (an inclusion) with the shard key paths ({@link withShardKey}). */
  private withShardKey(projection: Readonly<Record<string, unknown>>): Document {
    return withShardKey(projection, this.#shardKey);
  }

  /** Runs `operation` within the call's deadline and notes when it left and when its reply arrived. */
  protected async timed<T>(name: string, call: ResolvedCallOptions, operation: () => Promise<T>): Promise<Timed<T>> {
    const sentAt = this.localNow();
    const value = await withDeadline(name, call.timeout, operation);
    return { value, sentAt, arrivedAt: this.localNow() };
  }
}

/** The write concern of a lock write: `w` (the call's, unless given), and `wtimeoutMS` bounded by the call's timeout. */
export function writeConcern(call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w): WriteConcernSettings {
  return { w, wtimeoutMS: call.timeout };
}

/**
 * The options of a lock write besides its time limit: its write concern, and the caller's session
 * (a release's or an extension's). Inside a transaction, the write takes none: the transaction's
 * commit has it (MongoDB refuses one on an operation in a transaction).
 */
export function writeOptions(call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w): { writeConcern?: WriteConcernSettings; session?: ClientSession } {
  if (!call.session) return { writeConcern: writeConcern(call, w) };
  return inTransaction(call) ? { session: call.session } : { writeConcern: writeConcern(call, w), session: call.session };
}

/** A command in flight: when its deadline passes, and how to fail it then. */
interface Watched {
  readonly endsAt: number;
  readonly expire: () => void;
}

/**
 * One timer for every command in flight, instead of one per command: it fires at the earliest
 * deadline, fails the commands whose deadline passed, and waits for the next one. Commands
 * usually share one `timeout`, so a new command's deadline is rarely earlier than the armed one.
 */
class DeadlineWatch {
  private readonly watched = new Set<Watched>();
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;

  add(entry: Watched): void {
    this.watched.add(entry);
    if (entry.endsAt < this.armedFor) this.arm(entry.endsAt);
  }

  delete(entry: Watched): void {
    this.watched.delete(entry);
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.armedFor = at;
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - performance.now()));
    this.timer.unref(); // a command in flight keeps its own socket, and so the process, alive
  }

  private fire(): void {
    this.armedFor = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const entry of this.watched) {
      if (entry.endsAt <= now) {
        this.watched.delete(entry);
        entry.expire();
      } else if (entry.endsAt < next) next = entry.endsAt;
    }
    if (next < Infinity) this.arm(next);
  }
}

const deadlines = new DeadlineWatch();

/**
 * Runs `operation` and settles within `ms`: the driver's promise keeps running if the deadline
 * passes first, but its late outcome is observed (no unhandled rejection) and dropped.
 */
export function withDeadline<T>(name: string, ms: number, operation: () => Promise<T>): Promise<T> {
  const pending = operation();
  return new Promise<T>((resolve, reject) => {
    const entry: Watched = { endsAt: performance.now() + ms, expire: () => reject(new DeadlineExceededError(name, ms)) };
    deadlines.add(entry);
    pending.then(
      (value) => {
        deadlines.delete(entry);
        resolve(value);
      },
      (error: unknown) => {
        deadlines.delete(entry);
        reject(error);
      },
    );
  });
}
