import type { ClientSession, Collection, Document, UpdateFilter, WriteConcernSettings } from 'mongodb';
import type { LockOperation } from '../protocol/operation';
import type { ResolvedCallOptions } from '../common/options';
import { inTransaction } from '../common/write-params';
import { LockPaths } from '../protocol/stored-format';
import { replyProjection, withShardKey } from './reply-projection';
import { commandGateOf, type CommandGate } from './command-gate';
import { locateFailure } from './write-failures';

export { DeadlineExceededError, UnsentCommandError, withDeadline } from './deadlines';

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
  /** The cap on lock commands in flight of the collection's client, shared by every store on it. */
  private readonly gate: CommandGate;
  /** The shard key fields a locked document is addressed by, with its `_id` (set once the deployment is known): every reply projects them. */
  #shardKey: readonly string[] = [];

  constructor(
    readonly collection: Collection<Document>,
    readonly field: string,
    protected readonly localNow: () => number,
  ) {
    this.paths = new LockPaths(field);
    this.gate = commandGateOf(collection);
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
    return this.timed(
      'findOneAndUpdate',
      call,
      (sent) =>
        this.collection.findOneAndUpdate(filter, update as UpdateFilter<Document>, {
          returnDocument: 'after',
          ...projection,
          maxTimeMS: sent.timeout,
          ...writeOptions(sent, w),
          ...(arrayFilters ? { arrayFilters } : {}),
        }),
      [filter, update, projection, arrayFilters],
    );
  }

  /** One atomic update of the first matching document, at write concern `w`; resolves whether one matched. */
  async updateOne(filter: Document, update: Document, call: ResolvedCallOptions, w: ResolvedCallOptions['w'] = call.w, arrayFilters?: Document[]): Promise<boolean> {
    const result = await this.send(
      'updateOne',
      call,
      (sent) => this.collection.updateOne(filter, update as UpdateFilter<Document>, { maxTimeMS: sent.timeout, ...writeOptions(sent, w), ...(arrayFilters ? { arrayFilters } : {}) }),
      [filter, update, arrayFilters],
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
    const reply = await this.timed('aggregate', call, (sent) =>
      this.collection
        .aggregate([{ $match: filter }, { $limit: 1 }, { $project: { ...this.withShardKey({ [this.field]: 1 }), [SERVER_NOW]: '$$NOW' } }], {
          maxTimeMS: sent.timeout,
          readPreference: 'primary',
          // Inside the caller's transaction, the read joins it (its snapshot; a read concern is the transaction's).
          ...(call.session && { session: call.session }),
          ...(readConcern && !inTransaction(call) && { readConcern: { level: readConcern } }),
        })
        .toArray(),
      [filter],
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
    await this.send('bulkWrite', call, (sent) => this.collection.bulkWrite(statements, { ordered: false, maxTimeMS: sent.timeout, writeConcern: writeConcern(sent, w) }), statements);
  }

  /**
   * Reads the documents whose `_id` is in `ids` (their lock property and shard key) and the
   * server's clock, in one aggregate on the primary, as {@link inspect} reads one.
   */
  async readBack(ids: readonly unknown[], call: ResolvedCallOptions): Promise<Timed<Document[]>> {
    return this.timed('aggregate', call, (sent) =>
      this.collection
        .aggregate([{ $match: { _id: { $in: ids } } }, { $project: { ...this.withShardKey({ [this.field]: 1 }), [SERVER_NOW]: '$$NOW' } }], { maxTimeMS: sent.timeout, readPreference: 'primary' })
        .toArray(),
      [ids],
    );
  }

  /** The `_id`s of the first two documents `filter` matches, read on the primary: enough to tell none, one or several. */
  async idsMatching(filter: Document, call: ResolvedCallOptions): Promise<unknown[]> {
    const docs = await this.send('find', call, (sent) =>
      this.collection.find(filter, { projection: { _id: 1 }, limit: 2, maxTimeMS: sent.timeout, readPreference: 'primary' }).toArray(),
      [filter],
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

  /**
   * Runs `operation` in a slot of the client's lock commands ({@link CommandGate}), within the
   * call's deadline (counted from when it asked for the slot), and notes when it left the queue
   * and when its reply arrived. `operation` is given the call with what is left of its `timeout`
   * (see {@link send}).
   */
  protected timed<T>(name: string, call: ResolvedCallOptions, operation: (sent: ResolvedCallOptions) => Promise<T>, parts?: readonly unknown[]): Promise<Timed<T>> {
    let sentAt = 0;
    return this.send(
      name,
      call,
      (sent) => {
        sentAt = this.localNow();
        return operation(sent);
      },
      parts,
    ).then((value) => ({ value, sentAt, arrivedAt: this.localNow() }));
  }

  /**
   * Runs `operation` in a slot of the client's lock commands, within the call's deadline (see
   * {@link timed}). It is given the call as it leaves the queue: its `timeout` is what is left,
   * the command's `maxTimeMS` and `wtimeoutMS`, so that the server gives up when its caller does
   * (and the slot, freed then, is not freed while the command may still run). A failure tells
   * whether it came before sending from `parts`, what the command is made of ({@link locateFailure}).
   */
  protected send<T>(name: string, call: ResolvedCallOptions, operation: (sent: ResolvedCallOptions) => Promise<T>, parts?: readonly unknown[]): Promise<T> {
    return this.gate
      .send(name, call.timeout, call.priority, (leftMs) => operation(leftMs === call.timeout ? call : { ...call, timeout: leftMs }))
      .catch((error: unknown) => {
        throw locateFailure(error, parts);
      });
  }

  /**
   * Runs `then` once a slot of the client's lock commands is free, within the call's deadline:
   * what it computes before the first command it sends (a time stamp) is computed as that command
   * leaves the queue, never while it waits ({@link CommandGate.admitted}).
   */
  admitted<T>(call: ResolvedCallOptions, then: () => Promise<T>): Promise<T> {
    return this.gate.admitted(call.timeout, call.priority, then);
  }

  /** The client's lease keepers are behind: its attempts and reads are held back for `forMs` ({@link CommandGate.keepersBehind}). */
  keepersBehind(forMs: number): void {
    this.gate.keepersBehind(forMs);
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
