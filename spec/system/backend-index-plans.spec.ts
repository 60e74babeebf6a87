/**
 * The test backend plans by `_id` as mongod does: a filter with an equality (or `$in`) on `_id`
 * reads those documents only and filters them by the whole filter, whatever else it says (an
 * `$expr`, an `$and`, other fields). On mongod this is the query planner's doing; on
 * mongo-java-server it is support/java/IdPlans.java's. The semantics are the server's matcher's:
 * only the documents it reads change.
 */
import { expect } from 'chai';
import { Double, Int32, Long, type AnyBulkWriteOperation, type Collection, type Document } from 'mongodb';
import { freshCollection } from '../support/fixture';

/** Documents whose `_id` is a number of any BSON type, a string or a document, as mongod allows. */
type AnyId = { _id: number | string | Int32 | Long | Double | { a: number } };

/** A fresh collection holding `docs`, typed for ids of any kind. */
async function collectionOf(docs: Document[]): Promise<Collection<AnyId>> {
  return (await freshCollection(docs)) as unknown as Collection<AnyId>;
}

/** A bulk of one `updateOne` per id in `ids`, each selecting its document by `select(id)` and an `$expr`. */
function bulkOf(ids: number[], select: (id: number) => Document): AnyBulkWriteOperation<AnyId>[] {
  return ids.map((id) => ({
    updateOne: {
      filter: { ...select(id), $expr: { $gte: ['$n', 0] } },
      update: { $inc: { n: 1 } },
    },
  }));
}

describe("the test backend's plans by _id", function () {
  this.timeout(120_000);

  it('a filter with _id and other clauses matches as the whole filter says (a clause that fails finds nothing)', async function () {
    const docs = await collectionOf([{ _id: 1, kind: 'a', n: 1 }, { _id: 2, kind: 'b', n: 2 }, { _id: 'x', kind: 'a', n: 3 }]);
    expect(await docs.find({ _id: 1, kind: 'b' }).toArray()).to.deep.equal([]);
    expect(await docs.find({ _id: 1, kind: 'a' }).toArray()).to.deep.equal([{ _id: 1, kind: 'a', n: 1 }]);
    expect(await docs.find({ _id: { $eq: 2 }, $expr: { $eq: ['$n', 2] } }).toArray()).to.deep.equal([{ _id: 2, kind: 'b', n: 2 }]);
    expect(await docs.find({ _id: { $eq: 2 }, $expr: { $eq: ['$n', 3] } }).toArray()).to.deep.equal([]);
    expect(await docs.find({ _id: 1, $and: [{ n: { $gt: 0 } }, { kind: 'a' }] }).toArray()).to.have.length(1);
    expect(await docs.find({ _id: { $eq: 1, $ne: 1 }, kind: 'a' }).toArray()).to.deep.equal([]);
    expect(await docs.countDocuments({ _id: 1, kind: 'b' })).to.equal(0);
    expect(await docs.countDocuments({ _id: { $in: [1, 2, 'x'] }, kind: 'a' })).to.equal(2);
  });

  it('$in with ids that are not there finds those that are, and sort, skip and limit apply to the matches', async function () {
    const docs = await collectionOf([{ _id: 3, k: 1 }, { _id: 1, k: 1 }, { _id: 2, k: 2 }, { _id: 4, k: 1 }]);
    const found = await docs.find({ _id: { $in: [9, 4, 1, 3, 8] }, k: 1 }).toArray();
    expect(found.map((doc) => doc._id)).to.have.members([1, 3, 4]);
    expect((await docs.find({ _id: { $in: [9, 4, 1, 3, 8] }, k: 1 }).sort({ _id: -1 }).skip(1).limit(1).toArray()).map((doc) => doc._id)).to.deep.equal([3]);
    expect(await docs.find({ _id: { $in: [7, 8] }, k: 1 }).toArray()).to.deep.equal([]);
    expect(await docs.find({ _id: { $in: [] }, k: 1 }).toArray()).to.deep.equal([]);
    const matched = await docs.aggregate([{ $match: { _id: { $in: [1, 2, 3, 9] }, k: 1 } }, { $sort: { _id: 1 } }]).toArray();
    expect(matched.map((doc) => doc._id)).to.deep.equal([1, 3]);
    expect(await docs.aggregate([{ $match: { _id: 2, k: 1 } }]).toArray()).to.deep.equal([]);
  });

  it('numbers of different BSON types are the same _id (Int32 1, Long 1, Double 1.0), as on mongod', async function () {
    const docs = await collectionOf([{ _id: new Long(1), k: 'long' }, { _id: new Double(2.5), k: 'double' }, { _id: { a: 1 }, k: 'doc' }]);
    for (const id of [new Int32(1), new Long(1), new Double(1)]) {
      expect(await docs.find({ _id: id, k: 'long' }).toArray(), `_id ${id.constructor.name}`).to.have.length(1);
      expect(await docs.find({ _id: { $in: [id] }, $expr: { $eq: ['$k', 'long'] } }).toArray()).to.have.length(1);
      const updated = await docs.updateOne({ _id: id, k: 'long' }, { $set: { seen: true } });
      expect(updated.matchedCount).to.equal(1);
    }
    expect(await docs.find({ _id: 2.5, k: 'double' }).toArray()).to.have.length(1);
    expect(await docs.find({ _id: { a: 1 }, k: 'doc' }).toArray()).to.have.length(1);
    expect(await docs.find({ _id: { a: 2 }, k: 'doc' }).toArray()).to.have.length(0);
  });

  it('update, findAndModify and delete select by the whole filter; a miss upserts when asked', async function () {
    const docs = await collectionOf([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    expect((await docs.updateOne({ _id: 1, n: 5 }, { $set: { n: 6 } })).matchedCount).to.equal(0);
    expect((await docs.updateMany({ _id: { $in: [1, 2, 3] }, n: 0 }, { $inc: { n: 1 } })).modifiedCount).to.equal(2);
    expect(await docs.findOneAndUpdate({ _id: 1, $expr: { $eq: ['$n', 0] } }, { $set: { n: 9 } })).to.equal(null);
    expect(await docs.findOneAndUpdate({ _id: 1, $expr: { $eq: ['$n', 1] } }, { $set: { n: 9 } }, { returnDocument: 'after' })).to.deep.equal({ _id: 1, n: 9 });
    const upserted = await docs.updateOne({ _id: 3, n: 1 }, { $set: { m: 1 } }, { upsert: true });
    expect(upserted.upsertedId).to.equal(3);
    expect((await docs.deleteOne({ _id: 2, n: 0 })).deletedCount).to.equal(0);
    expect((await docs.deleteMany({ _id: { $in: [2, 3] }, n: 1 })).deletedCount).to.equal(2);
    expect(await docs.find().sort({ _id: 1 }).toArray()).to.deep.equal([{ _id: 1, n: 9 }]);
  });

  it('a bulk of 500 updateOne by _id with an $expr reads its documents only: far faster than the same bulk selecting by a field without index', async function () {
    const docs = await collectionOf(Array.from({ length: 10_000 }, (_, i) => ({ _id: i, key: i, n: 0 })));
    const ids = Array.from({ length: 500 }, (_, i) => i * 20);
    const timed = async (select: (id: number) => Document): Promise<number> => {
      const started = process.hrtime.bigint();
      const result = await docs.bulkWrite(bulkOf(ids, select), { ordered: false });
      expect(result.modifiedCount).to.equal(500);
      return Number(process.hrtime.bigint() - started) / 1e6;
    };
    await timed((id) => ({ _id: id })); // warms the server's code paths up
    // Interleaved, the faster of two runs each: a loaded machine slows a run, never speeds one up.
    const byId: number[] = [];
    const byField: number[] = [];
    for (let round = 0; round < 2; round++) {
      byId.push(await timed((id) => ({ _id: id })));
      byField.push(await timed((id) => ({ key: id })));
    }
    const [fastestById, fastestByField] = [Math.min(...byId), Math.min(...byField)];
    console.log(`      500 updateOne in a bulk on 10,000 documents: by _id ${fastestById.toFixed(0)} ms, by a field without index ${fastestByField.toFixed(0)} ms`);
    expect(await docs.countDocuments({ n: 5 })).to.equal(500);
    expect(await docs.countDocuments({ n: 0 })).to.equal(9_500);
    expect(fastestById * 5, `by _id ${byId.join(', ')} ms, by field ${byField.join(', ')} ms`).to.be.lessThan(fastestByField);
  });
});
