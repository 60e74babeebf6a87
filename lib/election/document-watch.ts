import type { ChangeFeed } from '../waiting/change-feed';
import { keyOf } from '../waiting/document-key';

/**
 * Calls `changed` after each change the feed reports for the document `id` (or for a document it
 * cannot name: a backend whose update events carry no `_id`, a stream restarted without
 * continuity); returns the function that stops it. Without a feed it never calls.
 */
export function watchDocument(feed: ChangeFeed | undefined, id: unknown, changed: () => void): () => void {
  if (!feed) return () => undefined;
  const key = keyOf(id);
  const unlisten = feed.listen((changedId) => {
    if (typeof changedId === 'symbol' || keyOf(changedId) === key) changed();
  });
  const wanted = feed.want(id);
  return () => {
    wanted.unwant();
    unlisten();
  };
}
