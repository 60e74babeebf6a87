/**
 * The canonical order of a group is MongoDB's own order of `_id`s: checked against the server's
 * sort of the same values.
 */
import { expect } from 'chai';
import { Binary, Decimal128, Int32, Long, MaxKey, MinKey, ObjectId, Timestamp, UUID } from 'mongodb';
import { compareBson } from '../../lib/common/bson-order';
import { freshCollection } from '../support/fixture';

describe('compareBson: MongoDB’s comparison order of _id values', () => {
  const ids = [
    'b',
    'a',
    'ab',
    'é',
    'Z',
    '',
    -1.5,
    3,
    new Long(2),
    new Int32(-7),
    2.5,
    new Decimal128('4.25'),
    new ObjectId('65a000000000000000000002'),
    new ObjectId('65a000000000000000000001'),
    new Date(1_000),
    new Date(-1_000),
    true,
    false,
    { a: 1 },
    { a: 'x' },
    { a: 1, b: 1 },
    { b: 0 },
    new Binary(Buffer.from([1, 2])),
    new Binary(Buffer.from([9])),
    new UUID('00000000-0000-4000-8000-000000000001'),
    new Timestamp({ t: 5, i: 1 }),
    new MinKey(),
    new MaxKey(),
    null,
  ];

  it('sorts a mix of types and values as the server sorts them', async () => {
    const collection = await freshCollection(ids.map((_id) => ({ _id })));
    const byServer = (await collection.find().sort({ _id: 1 }).toArray()).map((doc) => doc._id as unknown);
    const byUs = [...byServer].reverse().sort(compareBson);
    expect(byUs.map(show)).to.deep.equal(byServer.map(show));
  });

  it('is a total order: antisymmetric, and zero only for equal values', () => {
    for (const a of ids) {
      for (const b of ids) {
        expect(Math.sign(compareBson(a, b)), `${show(a)} vs ${show(b)}`).to.equal(-Math.sign(compareBson(b, a)));
        if (a !== b) expect(compareBson(a, b), `${show(a)} vs ${show(b)}`).to.not.equal(0);
      }
    }
    expect(compareBson(new ObjectId('65a000000000000000000001'), new ObjectId('65a000000000000000000001'))).to.equal(0);
    expect(compareBson(2, new Long(2))).to.equal(0);
    expect(compareBson(Long.fromString('9007199254740993'), Long.fromString('9007199254740992'))).to.equal(1);
  });
});

function show(value: unknown): string {
  if (value === null) return 'null';
  const bson = (value as { _bsontype?: string })?._bsontype;
  return `${bson ?? typeof value}:${JSON.stringify(value)}`;
}
