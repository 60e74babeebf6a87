import { keyOf } from './document-key';

/**
 * Above this many documents waited on, a feed watches the whole collection (as before it filtered
 * by `_id`): a `$in` of thousands of values costs the server more per event than the events it
 * saves, and every change of the set would reopen the stream.
 */
export const MOST_IDS = 1_000;

/** What a stream watches: the documents of `keys` (their `_id`s, `ids`), or the whole collection (`'all'`). */
export type Scope = { readonly keys: ReadonlySet<string>; readonly ids: readonly unknown[] } | 'all';

/**
 * The documents a process's waiters wait on (counted per document, as several waiters and lock
 * instances may share one feed), and since when the live stream tells of every change to each:
 * a waiter relies on the stream only for a refusal sent after that moment (lib/waiting/change-feed.ts).
 */
export class WatchedIds {
  private readonly wanted = new Map<string, { readonly id: unknown; count: number }>();
  /** What the live stream watches (undefined: no stream is live). */
  private scope: Scope | undefined;
  /** Since when (local ms) the live stream covers each key it watches, or every key (`all`). */
  private readonly since = new Map<string, number>();
  private allSince: number | undefined;

  /** One more waiter waits on document `id`; returns its key and the function that ends that. */
  want(id: unknown): { readonly key: string; readonly unwant: () => void } {
    const key = keyOf(id);
    const entry = this.wanted.get(key);
    if (entry) entry.count++;
    else this.wanted.set(key, { id, count: 1 });
    let wants = true;
    return {
      key,
      unwant: () => {
        if (!wants) return;
        wants = false;
        const left = this.wanted.get(key);
        if (left && --left.count === 0) this.wanted.delete(key);
      },
    };
  }

  /** What a stream opened now should watch. */
  next(): Scope {
    if (this.wanted.size > MOST_IDS) return 'all';
    return { keys: new Set(this.wanted.keys()), ids: [...this.wanted.values()].map((entry) => entry.id) };
  }

  /**
   * True when the live stream should be replaced by one of {@link next}: it misses a document
   * waited on; it watches the whole collection while at most half of {@link MOST_IDS} are waited
   * on; or most of what it watches is no longer waited on.
   */
  get stale(): boolean {
    const scope = this.scope;
    if (scope === undefined) return false;
    if (scope === 'all') return this.wanted.size <= MOST_IDS / 2;
    if (this.wanted.size > MOST_IDS) return true;
    for (const key of this.wanted.keys()) if (!scope.keys.has(key)) return true;
    return scope.keys.size > 2 * this.wanted.size + 16;
  }

  /**
   * A stream of `scope` answered its opening at local time `at`. With `continued`, it started
   * after the last event (or batch) its predecessor read: what both watch stays covered since
   * before; otherwise everything is covered from `at`.
   */
  live(scope: Scope, at: number, continued: boolean): void {
    const before = continued ? this.covering.bind(this) : (): number | undefined => undefined;
    const carried = new Map<string, number>();
    if (scope !== 'all') for (const key of scope.keys) carried.set(key, before(key) ?? at);
    this.allSince = scope === 'all' ? (continued && this.scope === 'all' ? (this.allSince ?? at) : at) : undefined;
    this.since.clear();
    for (const [key, since] of carried) this.since.set(key, since);
    this.scope = scope;
  }

  /** No stream is live: nothing is covered. */
  lost(): void {
    this.scope = undefined;
    this.allSince = undefined;
    this.since.clear();
  }

  /** True when the live stream tells of every change to document `key` made after local time `at`. */
  covers(key: string, at: number): boolean {
    const since = this.covering(key);
    return since !== undefined && since <= at;
  }

  private covering(key: string): number | undefined {
    return this.scope === 'all' ? this.allSince : this.since.get(key);
  }
}
