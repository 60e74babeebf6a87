import type { Document } from 'mongodb';
import type { LockPaths } from '../protocol/stored-format';

/*
 * The projection of a lock write's reply, and the document a caller's `document` option asked for,
 * taken back out of it. The reply always carries `_id` and every shard key path (they address the
 * locked document afterwards), whatever the caller's projection says; the document handed back
 * leaves out again what monglock added, and takes out what it did not let the server take out: it
 * is what the caller's projection selects. No projection sent mixes inclusions and exclusions or
 * names a path with a path inside it (MongoDB 4.4+ refuses both).
 */

/** How monglock changed a caller's projection so that the reply carries every shard key path. */
interface Changes {
  /** The caller's entries that are sent (with the shard key paths added to an inclusion), `_id: 0` aside. */
  readonly sent: Record<string, unknown>;
  /** An exclusion's paths that hold a shard key path, or lie inside one: not sent, taken out of the document afterwards. */
  readonly withheld: readonly string[];
  /** The shard key paths added to an inclusion, each with the caller's paths inside it that it replaced. */
  readonly added: ReadonlyArray<{ readonly path: string; readonly inside: readonly string[] }>;
}

/** True when `path` is `parent` or lies inside it. */
function within(path: string, parent: string): boolean {
  return path === parent || path.startsWith(`${parent}.`);
}

/** The shard key paths a reply must carry besides `_id`, parents first. */
function keyPaths(shardKey: readonly string[]): string[] {
  return shardKey.filter((path) => path !== '_id').sort((a, b) => a.split('.').length - b.split('.').length);
}

/** Adds each shard key path to the inclusion `sent` unless it includes it or a parent of it (a path inside it makes way). */
function addShardKey(sent: Record<string, unknown>, shardKey: readonly string[]): Changes['added'] {
  const added: Array<{ path: string; inside: string[] }> = [];
  for (const path of keyPaths(shardKey)) {
    const included = Object.keys(sent).filter((kept) => sent[kept]);
    if (included.some((kept) => within(path, kept))) continue;
    const inside = included.filter((kept) => within(kept, path));
    for (const kept of inside) delete sent[kept];
    sent[path] = 1;
    added.push({ path, inside });
  }
  return added;
}

/** What a caller's projection `asked` becomes ({@link Changes}). */
function changesTo(asked: Document, shardKey: readonly string[]): Changes {
  const entries = Object.entries(asked).filter(([path, mode]) => path !== '_id' || mode);
  if (entries.some(([, mode]) => mode)) {
    const keys = keyPaths(shardKey);
    // An inclusion's exclusion of a shard key path itself is left out (the document leaves the path out anyway).
    const sent = Object.fromEntries(entries.filter(([path, mode]) => mode || !keys.includes(path)));
    return { sent, withheld: [], added: addShardKey(sent, shardKey) };
  }
  const withheld = entries.map(([path]) => path).filter((path) => keyPaths(shardKey).some((key) => within(path, key) || within(key, path)));
  return { sent: Object.fromEntries(entries.filter(([path]) => !withheld.includes(path))), withheld, added: [] };
}

/** `projection` (an inclusion) with every shard key path ({@link addShardKey}). */
export function withShardKey(projection: Readonly<Record<string, unknown>>, shardKey: readonly string[]): Document {
  const sent = { ...projection };
  addShardKey(sent, shardKey);
  return sent;
}

/**
 * The projection of a reply for a caller's `document` option: the lock only (undefined), the whole
 * document (true), or the caller's projection with the lock (all of it, when the projection names
 * part of it: a path and its parent may not both be projected); always with `_id` and the shard key,
 * and never with the commit records (only a settling read needs them) unless the caller's
 * projection names the lock field itself.
 */
export function replyProjection(asked: Document | true | undefined, paths: LockPaths, shardKey: readonly string[]): Document {
  if (asked === undefined) return withShardKey(paths.reply, shardKey);
  const { sent } = asked === true ? { sent: {} } : changesTo(asked, shardKey);
  const modes = Object.values(sent);
  if (modes.every((mode) => !mode)) return { ...sent, [paths.committed]: 0 };
  const others = Object.entries(sent).filter(([path]) => !within(path, paths.field));
  return others.length < modes.length ? { ...Object.fromEntries(others), [paths.field]: 1 } : { ...sent, ...paths.reply };
}

/**
 * The document `doc` (a reply projected by {@link replyProjection}) as the caller's projection
 * `asked` selects it: without the lock's `field` unless the projection names it, without `_id` if
 * it excluded it, and without what monglock added to it or did not let the server take out.
 */
export function documentAsAsked(doc: Document, field: string, asked: Document | true, shardKey: readonly string[]): Document {
  let rest: Document = { ...doc };
  if (asked === true || !Object.entries(asked).some(([path, mode]) => mode && within(path, field))) delete rest[field];
  if (asked === true) return rest;
  if ('_id' in asked && !asked._id) delete rest._id;
  const { withheld, added } = changesTo(asked, shardKey);
  for (const path of withheld) rest = changedAt(rest, path.split('.'), () => undefined);
  const included = Object.keys(asked).filter((path) => asked[path]);
  for (const { path, inside } of added) {
    const parts = path.split('.');
    if (inside.length > 0) {
      rest = changedAt(rest, parts, (value) => keeping(value, inside.map((kept) => kept.slice(path.length + 1).split('.'))));
      continue;
    }
    // The outermost part of the path that no path the caller included goes through: all of it was added.
    const depth = parts.findIndex((_, i) => !included.some((kept) => within(kept, parts.slice(0, i + 1).join('.'))));
    if (depth >= 0) rest = changedAt(rest, parts.slice(0, depth + 1), () => undefined);
  }
  return rest;
}

/** A document the driver decoded (not a BSON value such as an ObjectId or a Date). */
function isDocument(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/**
 * `value` with what lies at `path` replaced by `change` of it (removed when that is undefined),
 * inside each element of an array on the way, as a projection reaches it; copied, not changed.
 */
function changedAt(value: unknown, path: readonly string[], change: (value: unknown) => unknown): Document {
  return changed(value, path, change) as Document;
}

/** {@link changedAt} of any value (a value that is neither a document nor an array is left as it is). */
function changed(value: unknown, path: readonly string[], change: (value: unknown) => unknown): unknown {
  if (Array.isArray(value)) return value.map((item) => changed(item, path, change));
  const [head, ...rest] = path;
  if (!isDocument(value) || head === undefined || !(head in value)) return value;
  const copy: Record<string, unknown> = { ...value };
  const next = rest.length === 0 ? change(copy[head]) : changed(copy[head], rest, change);
  if (next === undefined) delete copy[head];
  else copy[head] = next;
  return copy;
}

/** What an inclusion of `paths` (split at their dots) keeps of `value`: undefined for a value that is not a document (an array keeps what it keeps of each). */
function keeping(value: unknown, paths: ReadonlyArray<readonly string[]>): unknown {
  if (Array.isArray(value)) return value.map((item) => keeping(item, paths)).filter((item) => item !== undefined);
  if (!isDocument(value)) return undefined;
  const kept: Record<string, unknown> = {};
  for (const [name, item] of Object.entries(value)) {
    const under = paths.filter((path) => path[0] === name);
    if (under.some((path) => path.length === 1)) kept[name] = item;
    else if (under.length > 0) {
      const inner = keeping(item, under.map((path) => path.slice(1)));
      if (inner !== undefined) kept[name] = inner;
    }
  }
  return kept;
}
