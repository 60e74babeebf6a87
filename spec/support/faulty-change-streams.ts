/**
 * Fault injection for the change feed: a collection whose `watch` returns the real ChangeStream
 * behind a wrapper whose `tryNext` loses, duplicates, delays and reorders events, and sometimes
 * ends the stream (closes it, or fails a read). Every decision comes from a seeded generator;
 * every server cursor a stream used is recorded, to check afterwards that none is left open.
 */
import type { ChangeStream, Collection, Document, Long, MongoClient } from 'mongodb';
import { watchedCollection } from './watched-collection';

/** Probabilities per event that comes from the server (at most one fault per event), and the longest hold-back (ms). */
export interface StreamFaults {
  /** The event is lost. */
  readonly drop: number;
  /** The event is delivered twice. */
  readonly duplicate: number;
  /** The event is held back for a random time up to `maxDelayMs`. */
  readonly delay: number;
  /** The event is delivered after the next one (or after `maxDelayMs` when no other comes). */
  readonly swap: number;
  /** The stream is closed instead (as after an invalidate): this event and those held back are lost. */
  readonly close: number;
  /** The read fails with a non-resumable server error instead (the stream is left to its reader to close). */
  readonly fail: number;
  /**
   * Per stream: its server cursor is killed by another client at a random time within
   * `maxKillAfterMs` of its opening, most often early (while a read may be on its way), as a server
   * or an operator may end it; the driver resumes the stream with a new cursor, or fails its read.
   */
  readonly killAfterOpen: number;
  readonly maxKillAfterMs: number;
  readonly maxDelayMs: number;
}

/** No faults: every event delivered as it comes, no stream ended. */
export const NO_FAULTS: StreamFaults = { drop: 0, duplicate: 0, delay: 0, swap: 0, close: 0, fail: 0, killAfterOpen: 0, maxKillAfterMs: 0, maxDelayMs: 0 };

/** What the wrappers did in a run. */
export interface FaultCounts {
  streams: number;
  /** Server cursors killed by another client while their stream was open ({@link StreamFaults.killAfterOpen}). */
  cursorsKilled: number;
  events: number;
  delivered: number;
  dropped: number;
  duplicated: number;
  delayed: number;
  swapped: number;
  closed: number;
  failed: number;
}

interface Held {
  readonly event: Document;
  readonly due: number;
}

const nothing = (): undefined => undefined;

/** Change streams opened through {@link on} collections, each behind a fault-injecting wrapper. */
export class FaultyStreams {
  readonly counts: FaultCounts = { streams: 0, cursorsKilled: 0, events: 0, delivered: 0, dropped: 0, duplicated: 0, delayed: 0, swapped: 0, closed: 0, failed: 0 };
  /** The real streams, in the order they were opened. */
  readonly streams: ChangeStream[] = [];
  /** Every server cursor id a stream had (a resumed stream gets a new one), by its decimal string. */
  readonly cursorIds = new Map<string, Long>();

  private faults: StreamFaults;

  /** @param killCursor kills a server cursor from another client (`killCursors`). */
  constructor(
    private readonly random: () => number,
    faults: StreamFaults,
    private readonly killCursor: (id: Long) => Promise<unknown>,
  ) {
    this.faults = faults;
  }

  /** From now on, no more faults: every event is delivered as it comes, and no stream is closed. */
  calm(): void {
    this.faults = NO_FAULTS;
  }

  /** `collection` seen through `client` (another "process" for the library: its own feed), its streams faulty. */
  on(client: MongoClient, collection: Collection<Document>): Collection<Document> {
    return watchedCollection(client, collection, (stream) => {
      this.streams.push(stream);
      this.counts.streams++;
      return this.faulty(stream);
    });
  }

  /** A text for logs. */
  summary(): string {
    const c = this.counts;
    return `${c.streams} streams (${c.cursorsKilled} of their cursors killed on the server), ${c.events} events: ${c.delivered} delivered as they came, ${c.dropped} lost, ${c.duplicated} duplicated, ${c.delayed} delayed, ${c.swapped} swapped; ${c.closed} streams closed and ${c.failed} reads failed mid-feed`;
  }

  private record(stream: ChangeStream): void {
    const id = (stream as unknown as { cursor?: { id?: Long | null } }).cursor?.id;
    if (id && !id.isZero()) this.cursorIds.set(id.toString(), id);
  }

  /** Kills `stream`'s server cursor after `ms` (once it has one), unless the stream was closed or faults were calmed. */
  private async killLater(stream: ChangeStream, ms: number): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, ms).unref());
    for (;;) {
      if (stream.closed || this.faults.killAfterOpen === 0) return;
      const id = (stream as unknown as { cursor?: { id?: Long | null } }).cursor?.id;
      if (id && !id.isZero()) {
        this.record(stream);
        this.counts.cursorsKilled++;
        await this.killCursor(id).catch(nothing);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 5).unref());
    }
  }

  private faulty(real: ChangeStream): ChangeStream {
    const { random, counts } = this;
    if (random() < this.faults.killAfterOpen) void this.killLater(real, random() ** 3 * this.faults.maxKillAfterMs);
    const queue: Held[] = [];
    let swapped: { readonly event: Document; readonly since: number } | undefined;
    /** The real read underway (a hold-back that comes due first leaves it for the next call). */
    let inflight: Promise<{ readonly event: Document | null }> | undefined;

    const decide = (event: Document): Document | null => {
      const { faults } = this;
      const now = performance.now();
      counts.events++;
      if (swapped) {
        // The one held back comes right after this one.
        queue.push({ event: swapped.event, due: now });
        swapped = undefined;
        counts.swapped++;
        counts.delivered++;
        return event;
      }
      let r = random();
      if ((r -= faults.close) < 0) {
        counts.closed++;
        this.record(real);
        void real.close().catch(nothing);
        return null;
      }
      if ((r -= faults.fail) < 0) {
        counts.failed++;
        throw Object.assign(new Error('injected: the change stream failed (ChangeStreamHistoryLost)'), { code: 286, codeName: 'ChangeStreamHistoryLost' });
      }
      if ((r -= faults.drop) < 0) {
        counts.dropped++;
        return null;
      }
      if ((r -= faults.duplicate) < 0) {
        counts.duplicated++;
        queue.push({ event, due: now });
        return event;
      }
      if ((r -= faults.delay) < 0) {
        counts.delayed++;
        queue.push({ event, due: now + random() * faults.maxDelayMs });
        return null;
      }
      if ((r -= faults.swap) < 0) {
        swapped = { event, since: now };
        return null;
      }
      counts.delivered++;
      return event;
    };

    const tryNext = async (): Promise<Document | null> => {
      for (;;) {
        const { faults } = this;
        if (real.closed) return null;
        const now = performance.now();
        if (swapped && now - swapped.since >= faults.maxDelayMs) {
          queue.push({ event: swapped.event, due: now });
          swapped = undefined;
        }
        queue.sort((a, b) => a.due - b.due);
        if (queue[0] && queue[0].due <= now) return queue.shift()!.event;
        if (!inflight) {
          inflight = real.tryNext().then((event) => ({ event }));
          inflight.catch(nothing); // read below; a stream closed meanwhile rejects it unread
        }
        const nextDue = Math.min(queue[0]?.due ?? Infinity, swapped ? swapped.since + faults.maxDelayMs : Infinity);
        let timer: NodeJS.Timeout | undefined;
        const heldComesDue = nextDue === Infinity ? new Promise<never>(nothing) : new Promise<'held'>((resolve) => (timer = setTimeout(() => resolve('held'), nextDue - now)));
        try {
          const first = await Promise.race([inflight, heldComesDue]);
          if (first === 'held') continue;
          inflight = undefined;
          this.record(real);
          return first.event ? decide(first.event) : null;
        } catch (error) {
          inflight = undefined;
          this.record(real);
          throw error;
        } finally {
          clearTimeout(timer);
        }
      }
    };

    return new Proxy(real, {
      get: (target, key) => {
        if (key === 'tryNext') return tryNext;
        if (key === 'close') {
          return async () => {
            this.record(target);
            await target.close();
          };
        }
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}
