/**
 * MongoDB's comparison order of BSON values (the manual's "Comparison/Sort Order"), for the
 * values an `_id` can hold: the canonical order in which a group locks its documents. Every
 * process computes it alike, whatever the order of its requests.
 */

/** Rank of each BSON type in MongoDB's comparison order (numbers compare with each other, strings with symbols). */
const RANK = {
  minKey: 1,
  null: 2,
  number: 3,
  string: 4,
  object: 5,
  array: 6,
  binary: 7,
  objectId: 8,
  boolean: 9,
  date: 10,
  timestamp: 11,
  regex: 12,
  maxKey: 13,
} as const;

type Kind = keyof typeof RANK;

/** A value as the driver deserializes it: the bson classes name themselves in `_bsontype`. */
function kindOf(value: unknown): Kind {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number' || typeof value === 'bigint') return 'number';
  if (typeof value === 'string') return 'string';
  if (typeof value === 'boolean') return 'boolean';
  if (value instanceof Date) return 'date';
  if (value instanceof RegExp) return 'regex';
  if (Array.isArray(value)) return 'array';
  switch ((value as { _bsontype?: unknown })._bsontype) {
    case 'MinKey':
      return 'minKey';
    case 'MaxKey':
      return 'maxKey';
    case 'Int32':
    case 'Double':
    case 'Long':
    case 'Decimal128':
      return 'number';
    case 'BSONSymbol':
      return 'string';
    case 'Binary':
      return 'binary';
    case 'ObjectId':
      return 'objectId';
    case 'Timestamp':
      return 'timestamp';
    case 'BSONRegExp':
      return 'regex';
    default:
      return 'object';
  }
}

/** Negative, zero or positive as `a` sorts before, with or after `b` in MongoDB's order. */
export function compareBson(a: unknown, b: unknown): number {
  const kindA = kindOf(a);
  const kindB = kindOf(b);
  if (kindA !== kindB) return RANK[kindA] - RANK[kindB];
  switch (kindA) {
    case 'minKey':
    case 'maxKey':
    case 'null':
      return 0;
    case 'number':
      return compareNumbers(a, b);
    case 'string':
      return compareBytes(Buffer.from(String(a)), Buffer.from(String(b)));
    case 'boolean':
      return Number(a) - Number(b);
    case 'date':
      return sign((a as Date).getTime() - (b as Date).getTime());
    case 'objectId':
      return compareBytes(Buffer.from((a as { id: Uint8Array }).id), Buffer.from((b as { id: Uint8Array }).id));
    case 'binary':
      return compareBinary(a as BinaryLike, b as BinaryLike);
    case 'timestamp':
      return compareBigInts(BigInt(String(a)), BigInt(String(b)));
    case 'regex':
      return compareStrings(regexParts(a), regexParts(b));
    case 'array':
      return compareArrays(a as unknown[], b as unknown[]);
    case 'object':
      return compareObjects(a as Record<string, unknown>, b as Record<string, unknown>);
  }
}

interface BinaryLike {
  readonly sub_type: number;
  readonly buffer: Uint8Array;
  readonly position: number;
}

/** Binary data: by length, then subtype, then bytes. */
function compareBinary(a: BinaryLike, b: BinaryLike): number {
  const bytesA = Buffer.from(a.buffer.subarray(0, a.position));
  const bytesB = Buffer.from(b.buffer.subarray(0, b.position));
  return sign(bytesA.length - bytesB.length) || sign(a.sub_type - b.sub_type) || compareBytes(bytesA, bytesB);
}

/** Numbers of any BSON type, by value; integers beyond 2^53 exactly. */
function compareNumbers(a: unknown, b: unknown): number {
  const x = numeric(a);
  const y = numeric(b);
  if (typeof x === 'bigint' && typeof y === 'bigint') return compareBigInts(x, y);
  const nx = Number(x);
  const ny = Number(y);
  // NaN sorts before every other number.
  if (Number.isNaN(nx) || Number.isNaN(ny)) return Number(Number.isNaN(ny)) - Number(Number.isNaN(nx));
  return sign(nx - ny);
}

function numeric(value: unknown): number | bigint {
  if (typeof value === 'number' || typeof value === 'bigint') return value;
  const bson = value as { _bsontype: string; toBigInt?: () => bigint; valueOf(): unknown; toString(): string };
  if (bson._bsontype === 'Long' && bson.toBigInt) return bson.toBigInt();
  if (bson._bsontype === 'Decimal128') return Number(bson.toString());
  return Number(bson.valueOf());
}

function compareArrays(a: readonly unknown[], b: readonly unknown[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const order = compareBson(a[i], b[i]);
    if (order !== 0) return order;
  }
  return sign(a.length - b.length);
}

/** Embedded documents: pair by pair in field order, by the value's type, then the field name, then the value. */
function compareObjects(a: Record<string, unknown>, b: Record<string, unknown>): number {
  const entriesA = Object.entries(a);
  const entriesB = Object.entries(b);
  for (let i = 0; i < Math.min(entriesA.length, entriesB.length); i++) {
    const [keyA, valueA] = entriesA[i]!;
    const [keyB, valueB] = entriesB[i]!;
    const order = RANK[kindOf(valueA)] - RANK[kindOf(valueB)] || compareStrings(keyA, keyB) || compareBson(valueA, valueB);
    if (order !== 0) return sign(order);
  }
  return sign(entriesA.length - entriesB.length);
}

function regexParts(value: unknown): string {
  const regex = value as { source?: string; pattern?: string; flags?: string; options?: string };
  return `${regex.source ?? regex.pattern ?? ''}/${regex.flags ?? regex.options ?? ''}`;
}

/** Strings by their UTF-8 bytes (MongoDB's simple binary comparison). */
function compareStrings(a: string, b: string): number {
  return compareBytes(Buffer.from(a), Buffer.from(b));
}

function compareBytes(a: Buffer, b: Buffer): number {
  return sign(Buffer.compare(a, b));
}

function compareBigInts(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sign(n: number): number {
  return n < 0 ? -1 : n > 0 ? 1 : 0;
}
