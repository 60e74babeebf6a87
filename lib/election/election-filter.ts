import type { Document } from 'mongodb';
import { describe, isPlainObject } from '../common/validation';

/**
 * The filter naming one election's document: `{ _id }`, plus the values of `shardKey`'s fields on
 * a sharded collection, each a plain value (no query operator): `campaign` creates the document
 * with exactly these fields when it is missing. Anything else is refused with a TypeError.
 */
export function expectElectionFilter(filter: unknown, shardKey: readonly string[]): Document {
  if (!isPlainObject(filter)) throw new TypeError(`Expected \`filter\` to be an object naming one election by \`_id\`, got ${describe(filter)}`);
  const allowed = new Set(['_id', ...shardKey]);
  for (const [key, value] of Object.entries(filter)) {
    if (!allowed.has(key)) {
      throw new TypeError(`Expected \`filter\` to name an election by \`_id\`${shardKey.length ? ` and its shard key (${shardKey.join(', ')})` : ''} only, got key \`${key}\`: an election is one document`);
    }
    // A regular expression is a query too: it selects whichever documents match, and an upsert cannot take a value from it.
    const pattern = value instanceof RegExp || (typeof value === 'object' && value !== null && (value as { _bsontype?: unknown })._bsontype === 'BSONRegExp');
    if (value === undefined || pattern || (isPlainObject(value) && Object.keys(value).some((k) => k.startsWith('$')))) {
      throw new TypeError(`Expected \`filter.${key}\` to be a value, got ${describe(value)}: an election is named, not queried`);
    }
  }
  for (const key of allowed) {
    if (!(key in filter)) throw new TypeError(`Expected \`filter.${key}\`: an election is named by \`_id\`${shardKey.length ? ' and its shard key' : ''}`);
  }
  return filter;
}
