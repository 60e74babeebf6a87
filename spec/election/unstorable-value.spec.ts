import { expect } from 'chai';
import { election } from '../../lib';
import { freshCollection, snapshotOf } from '../support/fixture';

/**
 * Issue 41: bad input is refused before anything is written. A value whose keys start with `$` or
 * contain `.` is refused by a real mongod in a document-modifying update (the manual's "Field Names
 * with Periods and Dollar Signs": `$set` of such a field on an existing document fails; 4.4 refuses
 * them everywhere), which is how a campaign's acquisition and `proclaim` store the value; the campaign
 * would by then have created the document. mongo-java-server stores them, so this spec asks the
 * library itself to refuse them, with a TypeError, before any write.
 */
describe('election: a value MongoDB cannot store by update is refused before anything is written', () => {
  for (const value of [{ $gt: 1 }, { nested: { 'a.b': 1 } }]) {
    it(`campaign with value ${JSON.stringify(value)}`, async () => {
      const collection = await freshCollection();
      const before = await snapshotOf(collection);
      const elections = election({ collection, lease: 1_000 });
      const outcome = await elections.campaign({ _id: 'x' }, { value, wait: 0 }).then(
        async (term) => {
          await term.resign();
          return 'led';
        },
        (error: Error) => error,
      );
      expect(outcome, 'refused').to.be.instanceOf(TypeError);
      expect(await snapshotOf(collection), 'nothing written').to.equal(before);
    });
  }

  it('proclaim with a $-prefixed key', async () => {
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000 });
    const term = await elections.campaign({ _id: 'x' }, { value: 1 });
    const error = await term.proclaim({ $set: 2 } as never).then(() => 'stored', (e: unknown) => e);
    await term.resign();
    expect(error, 'refused').to.be.instanceOf(TypeError);
  });
});
