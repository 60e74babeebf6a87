import type { Collection, Document } from 'mongodb';
import { ChangeFeed, type ChangeListener } from './change-feed';

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
