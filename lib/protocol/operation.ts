import type { Document } from 'mongodb';

/**
 * One atomic operation of the protocol, as it is sent: one `findOneAndUpdate` or `updateOne`
 * whose filter holds every check, so that the check and the write are one step on the server.
 */
export interface LockOperation {
  /** What the document must satisfy: the caller's filter, and the protocol's conditions. */
  readonly filter: Document;
  /** What it writes when it matches. */
  readonly update: Document;
  /** The array filters of the update's `$[name]` paths. */
  readonly arrayFilters?: Document[];
}

/** Merges update documents operator by operator (later ones win on the same path); one alone is returned as it is. */
export function mergeUpdates(...updates: ReadonlyArray<Document | undefined>): Document {
  const given = updates.filter((update): update is Document => update !== undefined);
  if (given.length === 1) return given[0]!;
  const merged: Document = {};
  for (const update of given) {
    for (const [operator, fields] of Object.entries(update)) merged[operator] = { ...(merged[operator] as Document | undefined), ...(fields as Document) };
  }
  return merged;
}

/** `match` as the array filter of the element named `name` (`{ id }` → `{ 'mine.id': id }`). */
export function arrayFilterOf(name: string, match: Document): Document {
  return Object.fromEntries(Object.entries(match).map(([key, value]) => [`${name}.${key}`, value]));
}
