import { BSON } from 'mongodb';

/**
 * A map key for a document `_id`: the same for the same `_id`; for objects, the bytes the driver
 * sends (BSON, through a class's own `toBSON()`). Two `_id`s can share a key only when the
 * client's serialization differs from this one (`ignoreUndefined`): a wake-up is then a hint
 * that costs one attempt, and a hand-over is made only for an `_id` of {@link keyedExactly}.
 */
export function keyOf(id: unknown): string {
  if (id instanceof Date) return `date:${id.getTime()}`;
  // A BSON number is the number the driver decodes it to (as held locks and change events carry it): MongoDB matches numbers by value.
  const bsonType = (id as { _bsontype?: unknown } | null | undefined)?._bsontype;
  if (bsonType === 'Int32' || bsonType === 'Double' || (bsonType === 'Long' && Number.isSafeInteger(Number(id)))) return `number:${Number(id)}`;
  if (typeof id === 'object' && id !== null) return `object:${Buffer.from(BSON.serialize({ id })).toString('base64')}`;
  return `${typeof id}:${String(id)}`;
}

/**
 * True for an `_id` whose key no other `_id` shares: a string, number, boolean, Date, a value of
 * the driver's BSON types (`_bsontype`), or a plain object or array of such values (not a class of
 * the caller's, which may serialize itself otherwise, nor anything holding `undefined`).
 */
export function keyedExactly(id: unknown, depth = 0): boolean {
  if (typeof id === 'string' || typeof id === 'number' || typeof id === 'boolean' || id instanceof Date) return true;
  if (typeof id !== 'object' || id === null || depth > 8) return false;
  if (typeof (id as { _bsontype?: unknown })._bsontype === 'string') return true;
  const prototype: unknown = Object.getPrototypeOf(id);
  if (prototype !== Object.prototype && prototype !== Array.prototype && prototype !== null) return false;
  return Object.values(id).every((value) => keyedExactly(value, depth + 1));
}
