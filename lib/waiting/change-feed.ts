import type { ChangeStream, Collection, Document, ResumeToken } from 'mongodb';
import { ANY_DOCUMENT, ChangeListeners, SOME_DOCUMENT, type ChangeListener } from './change-listeners';
import { publish } from '../common/diagnostics';
import { awaitOptions, documentsMatch, lockChanges } from './lock-changes';
import { WatchedIds, type Scope } from './watched-ids';
import { clientClusterTime, ProgressWaiters, tokenTime } from './stream-progress';

export { awaitOptions, lockChanges } from './lock-changes';

export { ANY_DOCUMENT, SOME_DOCUMENT, type ChangeListener } from './change-listeners';

/** What a feed does now: `streaming` (a change stream is open), `polling` (none could be had), `idle` (nobody listens). */
export type FeedState = 'streaming' | 'polling' | 'idle';

/** How long a stream stays open after its last listener left, for the next waiter (ms). */
const LINGER_MS = 1_000;
/**
 * The pauses after an empty batch that came back at once, from a server that does not wait for
 * changes (mongo-java-server), in ms: from the first, doubling while nothing comes, back to it
 * after a change (a wake-up there comes at most the longest pause late; an idle feed costs about 125 getMores a second, only while someone waits).
 */
const EMPTY_PACE_MS = { first: 4, longest: 8 };
/** How long after a stream broke it is opened again, while someone listens (ms): doubling while it breaks before delivering anything, up to the longest. */
const REOPEN_MS = { first: 1_000, longest: 60_000 };
/**
 * The shortest time between two reopenings for a changed set of documents (ms): a spike of new
 * waiters reopens the stream about once per this, not once per waiter; a new waiter polls on its
 * short schedule meanwhile.
 */
export const RESCOPE_MS = 150;
/**
 * The smallest connection pool (`maxPoolSize`) a feed takes a connection of: a `getMore` holds its
 * connection for up to AWAIT_MS (lib/waiting/lock-changes.ts) on a server that waits for changes, so in a smaller pool
 * the lock calls (a lease's extensions among them) would queue behind it. Below it, waiters poll.
 */
const SMALLEST_POOL = 4;
/** Server codes that say no stream can be had on this deployment: not a replica set (40573), not authorized (13). */
const NO_STREAMS: ReadonlySet<number> = new Set([40573, 13]);
/** Driver errors that say the client was closed: its feeds stop for good. */
const CLIENT_GONE: ReadonlySet<string> = new Set(['MongoClientClosedError', 'MongoTopologyClosedError', 'MongoNotConnectedError']);

/** A stream of the feed: what it watches, the token it started after, and whether its opening answered. */
interface Opened {
  readonly stream: ChangeStream;
  readonly scope: Scope;
  readonly startAfter: ResumeToken | undefined;
  live: boolean;
}

/**
 * One change stream per process and collection, open while a waiter of this process waits on
 * it, shared by all of them: tells each listener of every change to the lock field of the
 * documents waited on (filtered on the server: {@link documentsMatch}, or the whole collection
 * above MOST_IDS), so that a release in another process wakes a waiter here at once. When the set
 * of documents changes, the stream is reopened (at most once per {@link RESCOPE_MS}) after the last
 * resume token, so that no event is lost. It also says how far the server has answered
 * ({@link afterRead}, {@link covers}, {@link onLoss}): a waiter relies on it to sleep long only
 * while it is sure to hear a change (lib/waiting/wake-up-source.ts). A wake-up is only a hint (the
 * woken waiter tries again and the server decides); without a stream (a standalone server, no
 * privilege, a broken or lagging one) waiters poll as they would anyway. The driver resumes the
 * stream after a network error or a failover; a stream that ends otherwise (an invalidate, a resume
 * token that fell off the oplog) is opened again, and every listener is told once ({@link ANY_DOCUMENT}).
 */
export class ChangeFeed {
  private readonly listeners = new ChangeListeners();
  private opened: Opened | undefined;
  private lingering: NodeJS.Timeout | undefined;
  private reopening: NodeJS.Timeout | undefined;
  private rescoping: NodeJS.Timeout | undefined;
  private rescopedAt = -Infinity;
  /** Streams with a read (the opening aggregate, a getMore) on its way. */
  private readonly reading = new Set<ChangeStream>();
  /** How long after the next break the stream is opened again. */
  private reopenMs = REOPEN_MS.first;
  /** The deployment has no change streams for this client: never tried again. */
  private unavailable = false;
  private readonly ids = new WatchedIds();
  private readonly progress = new ProgressWaiters();
  private readonly lossListeners = new Set<() => void>();

  constructor(
    private readonly collection: Collection<Document>,
    private readonly field: string,
  ) {}

  /** What the feed does now. */
  get state(): FeedState {
    if (this.listeners.size === 0 && !this.opened) return 'idle';
    return this.opened ? 'streaming' : 'polling';
  }

  /** Tells `listener` of each change until the returned function is called. */
  listen(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    clearTimeout(this.lingering);
    this.lingering = undefined;
    this.open(undefined);
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.lingering = setTimeout(() => this.close(), LINGER_MS).unref();
    };
  }

  /** A waiter here waits on document `id`: the stream is to carry its changes (reopened for it soon); returns its key and the function that ends that. */
  want(id: unknown): { readonly key: string; readonly unwant: () => void } {
    const wanted = this.ids.want(id);
    this.rescopeSoon();
    return {
      key: wanted.key,
      unwant: () => {
        wanted.unwant();
        this.rescopeSoon();
      },
    };
  }

  /** True while the stream tells of every change to document `key` made after local time `at`: the live one, or while it opens, one that continues its predecessor (`startAfter`) for a document both watch (a change made meanwhile comes with its first answer, which a waiter awaits before it sleeps long: {@link afterRead}; an opening that fails is a loss). */
  covers(key: string, at: number): boolean {
    const opened = this.opened;
    if (!opened) return false;
    const carried = opened.startAfter !== undefined && (opened.scope === 'all' || opened.scope.keys.has(key));
    return (opened.live || carried) && this.ids.covers(key, at);
  }

  /** Calls `then` once the stream has made progress past now ({@link ProgressWaiters.add}: past the client's cluster time now, where the server gives both times, so a stream that lags behind its majority commit point is not relied on). */
  afterRead(since: number, then: () => void): () => void {
    return this.progress.add(since, clientClusterTime(this.collection), then);
  }

  /** Calls `lost` whenever the stream stops covering what it covered (it broke, closed, or restarted without continuity); returns the function that stops listening. */
  onLoss(lost: () => void): () => void {
    this.lossListeners.add(lost);
    return () => this.lossListeners.delete(lost);
  }

  /** Closes the stream (the feed opens it again for its next listener). */
  close(): void {
    clearTimeout(this.lingering);
    clearTimeout(this.reopening);
    clearTimeout(this.rescoping);
    this.lingering = this.reopening = this.rescoping = undefined;
    this.drop();
  }

  /** Stops reading the stream of the feed (none is live then); with `continued`, its successor starts after its last token, and what it covered stays covered once that one is live. */
  private drop(continued = false): void {
    const opened = this.opened;
    this.opened = undefined;
    if (!continued) this.lose();
    // Once its opening aggregate answered, closed at once (its killCursors ends a getMore waiting on the server, which holds a connection); before, when
    // it returns (see follow): the driver would leave the cursor the answer opens on the server.
    if (opened && (opened.live || !this.reading.has(opened.stream))) void opened.stream.close().catch(() => undefined);
  }

  private lose(): void {
    this.ids.lost();
    for (const lost of [...this.lossListeners]) lost();
  }

  private open(startAfter: ResumeToken | undefined): void {
    if (this.opened || this.reopening || this.unavailable || this.listeners.size === 0) return;
    const client = (this.collection as unknown as { db?: { client?: { options?: { maxPoolSize?: number } } } }).db?.client;
    const poolSize = client?.options?.maxPoolSize;
    if (poolSize !== undefined && poolSize > 0 && poolSize < SMALLEST_POOL) return this.unavailableBecause(new Error(`maxPoolSize ${poolSize}: a stream would hold one of its connections`));
    const scope = this.ids.next();
    const pipeline = scope === 'all' ? lockChanges(this.field) : [documentsMatch(scope.ids), ...lockChanges(this.field)];
    try {
      const stream = this.collection.watch(pipeline, { ...awaitOptions(this.collection), ...(startAfter === undefined ? {} : { startAfter }) });
      const opened: Opened = { stream, scope, startAfter, live: false };
      this.opened = opened;
      this.rescopedAt = performance.now();
      // Live once its opening aggregate answered (its first token), not after the getMore the driver sends next (up to AWAIT_MS on a server that waits for changes).
      stream.once('resumeTokenChanged', () => {
        if (this.opened !== opened || opened.live) return;
        this.wentLive(opened);
        this.progress.answered(performance.now(), tokenTime(stream.resumeToken));
      });
      void this.follow(opened);
    } catch (error) {
      this.unavailableBecause(error); // the driver refused the stream's options
    }
  }

  /** The set of documents changed: the stream is reopened for it, at most once per {@link RESCOPE_MS}, once its current opening answered. */
  private rescopeSoon(): void {
    if (this.rescoping || !this.opened?.live || !this.ids.stale) return;
    this.rescoping = setTimeout(() => {
      this.rescoping = undefined;
      if (!this.opened?.live || !this.ids.stale) return;
      const token = this.opened?.stream.resumeToken ?? undefined;
      this.drop(token !== undefined);
      this.open(token);
    }, Math.max(0, this.rescopedAt + RESCOPE_MS - performance.now())).unref();
  }

  /** No stream can be had with this client: its waiters poll for good. */
  private unavailableBecause(error: unknown): void {
    this.unavailable = true;
    publish.feedBroke(() => ({ namespace: this.collection.namespace, error, polling: 'for good' }));
  }

  /** Reads `opened` while it is this feed's, telling the listeners of each change (the driver resumes it after a network error or a failover). */
  private async follow(opened: Opened): Promise<void> {
    const { stream } = opened;
    try {
      let pause = EMPTY_PACE_MS.first;
      while (this.opened === opened && !stream.closed) {
        const asked = performance.now();
        this.reading.add(stream);
        const event: Document | null = await stream.tryNext().finally(() => this.reading.delete(stream));
        if (this.opened !== opened) break;
        this.reopenMs = REOPEN_MS.first; // it read: a later break is a new one
        if (!opened.live) this.wentLive(opened);
        if (event) {
          pause = EMPTY_PACE_MS.first;
          const id: unknown = (event.documentKey as Document | undefined)?._id;
          this.listeners.changed(id === undefined || id === null ? SOME_DOCUMENT : id);
        }
        this.progress.answered(performance.now(), tokenTime(stream.resumeToken));
        if (!event && performance.now() - asked < EMPTY_PACE_MS.first) {
          await new Promise((resolve) => setTimeout(resolve, pause).unref());
          pause = Math.min(EMPTY_PACE_MS.longest, pause * 2);
        }
      }
      this.broke(opened, undefined); // closed by the server (an invalidate), or no longer this feed's
    } catch (error) {
      this.broke(opened, error);
    } finally {
      if (this.opened !== opened) void stream.close().catch(() => undefined); // closed while reading: its cursor is killed now
    }
  }

  /** `opened` answered its opening: it covers what it watches, since before if it continues its predecessor. */
  private wentLive(opened: Opened): void {
    opened.live = true;
    this.ids.live(opened.scope, performance.now(), opened.startAfter !== undefined);
    this.rescopeSoon();
  }

  /** `opened` ended: opened again later while someone listens, and everyone is told once of what it may have missed. */
  private broke(opened: Opened, error: unknown): void {
    if (this.opened !== opened) return;
    this.opened = undefined;
    void opened.stream.close().catch(() => undefined);
    this.lose();
    this.listeners.tell(ANY_DOCUMENT);
    // A server that refuses `startAfter` (the token unknown to it): opened again at once, without it.
    if (opened.startAfter !== undefined && !opened.live && error !== undefined) return this.open(undefined);
    const code = (error as { code?: unknown } | undefined)?.code;
    const name = (error as { name?: unknown } | undefined)?.name;
    if ((typeof code === 'number' && NO_STREAMS.has(code)) || CLIENT_GONE.has(String(name))) this.unavailable = true;
    publish.feedBroke(() => ({ namespace: this.collection.namespace, error, polling: this.unavailable ? 'for good' : 'until reopened' }));
    if (this.unavailable || this.listeners.size === 0) return;
    this.reopening = setTimeout(() => {
      this.reopening = undefined;
      this.open(undefined);
    }, this.reopenMs).unref();
    this.reopenMs = Math.min(REOPEN_MS.longest, this.reopenMs * 2);
  }
}

export { changeFeedOf, FeedTap } from './feed-tap';
