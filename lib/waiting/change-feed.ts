import type { ChangeStream, Collection, Document } from 'mongodb';
import { keyOf } from './document-key';
import { publish } from '../common/diagnostics';

/** A change whose event does not say which document it touched (mongo-java-server's update events). */
export const SOME_DOCUMENT: unique symbol = Symbol('some document');

/** Told of each change to the lock field of a document: its `_id`, or {@link SOME_DOCUMENT}. */
export type ChangeListener = (id: unknown) => void;

/** What a feed does now: `streaming` (a change stream is open), `polling` (none could be had), `idle` (nobody listens). */
export type FeedState = 'streaming' | 'polling' | 'idle';

/** How long a stream stays open after its last listener left, for the next waiter (ms). */
const LINGER_MS = 1_000;
/** How long a `getMore` waits on the server for a change (ms): an idle feed costs one command per this. */
const AWAIT_MS = 1_000;
/**
 * The pauses after an empty batch that came back at once, from a server that does not wait for
 * changes (mongo-java-server), in ms: from the first, doubling while nothing comes, back to it
 * after a change (a wake-up there comes at most the longest pause late; an idle feed costs about 125 getMores a second, only while someone waits).
 */
const EMPTY_PACE_MS = { first: 4, longest: 8 };
/** How long after a stream broke it is opened again, while someone listens (ms): doubling while it breaks before delivering anything, up to the longest. */
const REOPEN_MS = { first: 1_000, longest: 60_000 };
/**
 * The smallest connection pool (`maxPoolSize`) a feed takes a connection of: a `getMore` holds its
 * connection for up to {@link AWAIT_MS} on a server that waits for changes, so in a smaller pool
 * the lock calls (a lease's extensions among them) would queue behind it. Below it, waiters poll.
 */
const SMALLEST_POOL = 4;
/** Server codes that say no stream can be had on this deployment: not a replica set (40573), not authorized (13). */
const NO_STREAMS: ReadonlySet<number> = new Set([40573, 13]);
/** Driver errors that say the client was closed: its feeds stop for good. */
const CLIENT_GONE: ReadonlySet<string> = new Set(['MongoClientClosedError', 'MongoTopologyClosedError', 'MongoNotConnectedError']);

/**
 * One change stream per process and collection, open while a waiter of this process waits on
 * it, shared by all of them: tells each listener of every change to the lock field of a
 * document (filtered on the server), so that a release in another process wakes a waiter here at
 * once. A wake-up is only a hint (the woken waiter tries again and the server decides); without a
 * stream (a standalone server, no privilege, a broken or lagging one) waiters poll as they would
 * anyway. The driver resumes the stream after a network error or a failover; a stream that ends
 * otherwise (an invalidate, a resume token that fell off the oplog) is opened again, and every
 * listener is told once, for what it may have missed.
 */
export class ChangeFeed {
  private readonly listeners = new Set<ChangeListener>();
  private stream: ChangeStream | undefined;
  private lingering: NodeJS.Timeout | undefined;
  private reopening: NodeJS.Timeout | undefined;
  /** Streams with a read (the opening aggregate, a getMore) on its way. */
  private readonly reading = new Set<ChangeStream>();
  /** How long after the next break the stream is opened again. */
  private reopenMs = REOPEN_MS.first;
  /** The deployment has no change streams for this client: never tried again. */
  private unavailable = false;

  constructor(
    private readonly collection: Collection<Document>,
    private readonly field: string,
  ) {}

  /** What the feed does now. */
  get state(): FeedState {
    if (this.listeners.size === 0 && !this.stream) return 'idle';
    return this.stream ? 'streaming' : 'polling';
  }

  /** Tells `listener` of each change until the returned function is called. */
  listen(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    clearTimeout(this.lingering);
    this.lingering = undefined;
    this.open();
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.lingering = setTimeout(() => this.close(), LINGER_MS).unref();
    };
  }

  /** Closes the stream (the feed opens it again for its next listener). */
  close(): void {
    clearTimeout(this.lingering);
    clearTimeout(this.reopening);
    this.lingering = this.reopening = undefined;
    const stream = this.stream;
    this.stream = undefined;
    // A stream with a read on its way is closed when the read returns (see follow): closed before
    // its opening aggregate answered, the driver would leave the cursor the answer opens on the server.
    if (stream && !this.reading.has(stream)) void stream.close().catch(() => undefined);
  }

  private open(): void {
    if (this.stream || this.reopening || this.unavailable || this.listeners.size === 0) return;
    const client = (this.collection as unknown as { db?: { client?: { options?: { maxPoolSize?: number } } } }).db?.client;
    const poolSize = client?.options?.maxPoolSize;
    if (poolSize !== undefined && poolSize > 0 && poolSize < SMALLEST_POOL) return this.unavailableBecause(new Error(`maxPoolSize ${poolSize}: a stream would hold one of its connections`));
    try {
      const stream = this.collection.watch(lockChanges(this.field), awaitOptions(this.collection));
      this.stream = stream;
      void this.follow(stream);
    } catch (error) {
      this.unavailableBecause(error); // the driver refused the stream's options
    }
  }

  /** No stream can be had with this client: its waiters poll for good. */
  private unavailableBecause(error: unknown): void {
    this.unavailable = true;
    publish.feedBroke(() => ({ namespace: this.collection.namespace, error, polling: 'for good' }));
  }

  /** Reads `stream` while it is this feed's, telling the listeners of each change (the driver resumes it after a network error or a failover). */
  private async follow(stream: ChangeStream): Promise<void> {
    try {
      let pause = EMPTY_PACE_MS.first;
      while (this.stream === stream && !stream.closed) {
        const asked = performance.now();
        this.reading.add(stream);
        const event: Document | null = await stream.tryNext().finally(() => this.reading.delete(stream));
        if (this.stream !== stream) break;
        this.reopenMs = REOPEN_MS.first; // it read: a later break is a new one
        if (event) {
          pause = EMPTY_PACE_MS.first;
          const id: unknown = (event.documentKey as Document | undefined)?._id;
          this.changed(id === undefined || id === null ? SOME_DOCUMENT : id);
        } else if (performance.now() - asked < EMPTY_PACE_MS.first) {
          await new Promise((resolve) => setTimeout(resolve, pause).unref());
          pause = Math.min(EMPTY_PACE_MS.longest, pause * 2);
        }
      }
      this.broke(stream, undefined); // closed by the server (an invalidate), or no longer this feed's
    } catch (error) {
      this.broke(stream, error);
    } finally {
      if (this.stream !== stream) void stream.close().catch(() => undefined); // closed while reading: its cursor is killed now
    }
  }

  /** `stream` ended: opened again later while someone listens, and everyone is told once of what it may have missed. */
  private broke(stream: ChangeStream, error: unknown): void {
    if (this.stream !== stream) return;
    this.stream = undefined;
    void stream.close().catch(() => undefined);
    const code = (error as { code?: unknown } | undefined)?.code;
    const name = (error as { name?: unknown } | undefined)?.name;
    if ((typeof code === 'number' && NO_STREAMS.has(code)) || CLIENT_GONE.has(String(name))) this.unavailable = true;
    publish.feedBroke(() => ({ namespace: this.collection.namespace, error, polling: this.unavailable ? 'for good' : 'until reopened' }));
    this.tell(SOME_DOCUMENT);
    if (this.unavailable || this.listeners.size === 0) return;
    this.reopening = setTimeout(() => {
      this.reopening = undefined;
      this.open();
    }, this.reopenMs).unref();
    this.reopenMs = Math.min(REOPEN_MS.longest, this.reopenMs * 2);
  }

  /** Documents changed since the listeners were last told, by key (told once per batch of events). */
  private pending = new Map<string, unknown>();

  /** Tells the listeners of document `id`'s change once the batch it came in is read (a document changed several times in it is told of once). */
  private changed(id: unknown): void {
    if (this.pending.size === 0) setImmediate(() => this.flush());
    this.pending.set(id === SOME_DOCUMENT ? '' : keyOf(id), id);
  }

  private flush(): void {
    const changed = this.pending;
    this.pending = new Map();
    if (changed.has('')) this.tell(SOME_DOCUMENT);
    else for (const id of changed.values()) this.tell(id);
  }

  private tell(id: unknown): void {
    for (const listener of this.listeners) listener(id);
  }
}

/**
 * The server-side filter of a feed: deletes, replacements, and updates that set or remove what
 * says who holds the lock — the field itself, its `tags` or one tag's list or entry, a pending
 * `upgrade`, `limits`, v2's `active`/`timestamp`, or the fair `queue` as a whole (a ticket taken
 * out) — not its bookkeeping (`now`, `until`, `fence`, one ticket, an entry's `exp`: so a
 * waiter's own ticket renewals and a holder's extensions wake nobody). An update event without a description, as mongo-java-server sends them, passes
 * too. Only the document's key and the resume token come back.
 */
export function lockChanges(field: string): Document[] {
  // A path's parts: the field; then `tags` with at most a tag and an index, `upgrade` or `limits` with anything, or `active`/`timestamp` alone.
  const holds = (path: string): Document => {
    const parts = { $split: [path, '.'] };
    const part = (n: number): Document => ({ $arrayElemAt: [parts, n] });
    const size = { $size: parts };
    return {
      $and: [
        { $eq: [part(0), field] },
        {
          $or: [
            { $eq: [size, 1] },
            { $and: [{ $eq: [part(1), 'tags'] }, { $lte: [size, 4] }] },
            { $in: [part(1), ['upgrade', 'limits']] },
            { $and: [{ $eq: [size, 2] }, { $eq: [part(1), 'queue'] }] }, // a ticket taken out (pulled: the whole array), so the next may go
            { $and: [{ $eq: [size, 2] }, { $in: [part(1), ['active', 'timestamp']] }] },
          ],
        },
      ],
    };
  };
  const any = (input: Document, path: string): Document => ({ $gt: [{ $size: { $filter: { input, cond: holds(path) } } }, 0] });
  const updated = any({ $objectToArray: { $ifNull: ['$updateDescription.updatedFields', {}] } }, '$$this.k');
  const removed = any({ $ifNull: ['$updateDescription.removedFields', []] }, '$$this');
  const truncated = any({ $ifNull: ['$updateDescription.truncatedArrays', []] }, '$$this.field');
  return [
    {
      $match: {
        $or: [
          { operationType: { $in: ['delete', 'replace'] } },
          { operationType: 'update', updateDescription: { $exists: false } },
          { operationType: 'update', $expr: { $or: [updated, removed, truncated] } },
        ],
      },
    },
    { $project: { documentKey: 1 } },
  ];
}

/**
 * How long a stream's `getMore` waits: `awaitMs` ({@link AWAIT_MS}), below the collection's client-side
 * operation timeout (`timeoutMS`; the driver refuses a wait that is not below it, and with 0, no
 * timeout, any explicit wait: the server's default, 1 s, then).
 */
export function awaitOptions(collection: Collection<Document>, awaitMs = AWAIT_MS): { maxAwaitTimeMS?: number } {
  const timeoutMS = (collection as unknown as { timeoutMS?: number }).timeoutMS;
  if (timeoutMS === undefined) return { maxAwaitTimeMS: awaitMs };
  return timeoutMS === 0 ? {} : { maxAwaitTimeMS: Math.max(1, Math.min(awaitMs, Math.floor(timeoutMS / 2))) };
}

/** One listener's connection to a feed: open while it needs the feed (idempotent both ways). */
export class FeedTap {
  private unlisten: (() => void) | undefined;

  constructor(
    private readonly feed: ChangeFeed,
    private readonly listener: ChangeListener,
  ) {}

  open(): void {
    this.unlisten ??= this.feed.listen(this.listener);
  }

  close(): void {
    this.unlisten?.();
    this.unlisten = undefined;
  }
}

const feeds = new WeakMap<object, Map<string, ChangeFeed>>();

/** The feed of `collection`'s lock field `field`, one per driver client, namespace and field. */
export function changeFeedOf(collection: Collection<Document>, field: string): ChangeFeed {
  const client: object = (collection as unknown as { db?: { client?: object } }).db?.client ?? collection;
  let byNamespace = feeds.get(client);
  if (!byNamespace) feeds.set(client, (byNamespace = new Map()));
  const key = `${collection.namespace}\u0000${field}`;
  let feed = byNamespace.get(key);
  if (!feed) byNamespace.set(key, (feed = new ChangeFeed(collection, field)));
  return feed;
}
