import { BSON } from 'mongodb';
import { describe } from '../common/validation';

/** Throws a TypeError unless `value` can be stored in a document (BSON), before anything is written. */
export function expectStorable(name: string, value: unknown): unknown {
  if (value === undefined || typeof value === 'function' || typeof value === 'symbol') {
    throw new TypeError(`Expected \`${name}\` to be a value MongoDB can store, got ${describe(value)}`);
  }
  try {
    BSON.serialize({ value }, { checkKeys: true }); // keys starting with `$` or holding `.`: a mongod refuses them in an update
  } catch (error) {
    throw new TypeError(`Expected \`${name}\` to be a value MongoDB can store: ${(error as Error).message}`);
  }
  return value;
}

/** The same value, for telling a change of value from a renewal (BSON bytes: key order counts). */
export function sameValue(a: unknown, b: unknown): boolean {
  return Buffer.from(BSON.serialize({ v: a })).equals(Buffer.from(BSON.serialize({ v: b })));
}
