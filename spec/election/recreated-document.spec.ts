import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { election } from '../../lib';
import { freshCollection, newClient, sleep } from '../support/fixture';

/**
 * Fences must strictly increase across the terms of one election, "also when its document was
 * deleted and created again" (issue 41 §1). The election lives in the user's own documents: the
 * user's code may delete and insert it again, or replace it whole, while a campaigner waits.
 */
describe('election: the document re-created by the user while a campaigner waits', () => {
  const recreations: Array<[string, (collection: Collection<Document>) => Promise<unknown>]> = [
    ['deleted, then inserted again', async (collection) => {
      await collection.deleteOne({ _id: 'x' as never });
      await collection.insertOne({ _id: 'x' as never, settings: 1 });
    }],
    ['replaced whole (replaceOne)', (collection) => collection.replaceOne({ _id: 'x' as never }, { settings: 2 })],
  ];
  for (const [how, recreate] of recreations) {
    it(`${how}: the waiting campaigner's term gets a token above the previous leader's`, async function () {
      this.timeout(20_000);
      const collection = await freshCollection([{ _id: 'x', settings: 0 }]);
      const lease = 800;
      const elections = election({ collection, lease });
      const first = await elections.campaign({ _id: 'x' }, { value: 'a' });
      const other = election({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), lease });
      const waiting = other.campaign({ _id: 'x' }, { value: 'b' });
      await sleep(200); // the second campaigner has created nothing: it waits for the lock
      await recreate(collection);
      const second = await waiting;
      const seen = await elections.leader({ _id: 'x' });
      expect(first.signal.aborted || (await sleep(2 * lease), first.signal.aborted), 'the first term ended').to.equal(true);
      expect(seen?.value).to.equal('b');
      expect(second.fence, `tokens: first ${first.fence}, second ${second.fence}`).to.be.above(first.fence);
      await second.resign();
      await first.resign();
    });
  }
});
