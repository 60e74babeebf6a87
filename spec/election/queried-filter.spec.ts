import { expect } from 'chai';
import { BSONRegExp } from 'mongodb';
import { election } from '../../lib';
import { failureOf, freshCollection, rejectionOf, snapshotOf } from '../support/fixture';

/**
 * Issue 41 §1: an election is one document "named by an `_id` filter"; "other filters are refused
 * with a TypeError" (the library's own message: "an election is named, not queried"). A regular
 * expression is a query: it selects whichever documents match, and an upsert cannot take `_id`
 * from it (a mongod creates a document under a new ObjectId instead).
 */
describe('election: an `_id` that is a regular expression is a query, refused before anything is written', () => {
  for (const [name, id] of [
    ['RegExp', /^a/],
    ['BSONRegExp', new BSONRegExp('^a')],
  ] as const) {
    it(`${name}: campaign, leader and observe refuse it with a TypeError`, async () => {
      const collection = await freshCollection([{ _id: 'abc', data: 1 }]);
      const before = await snapshotOf(collection);
      const elections = election({ collection, lease: 1_000 });
      const campaigned = await elections.campaign({ _id: id }, { wait: 0 }).then(
        async (term) => {
          await term.resign();
          return 'led';
        },
        (error: Error) => error,
      );
      expect(campaigned, 'campaign').to.be.instanceOf(TypeError);
      expect(await snapshotOf(collection), 'nothing written').to.equal(before);
      expect(await rejectionOf(elections.leader({ _id: id })), 'leader').to.be.instanceOf(TypeError);
      expect(await failureOf(() => elections.observe({ _id: id })), 'observe').to.be.instanceOf(TypeError);
    });
  }
});
