/**
 * The change feed on the clients users configure: whatever the client's options, a waiting
 * acquisition with `changeStreams` on (the default) behaves at least as it does with it off.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection, newClient, requireCapability } from '../support/fixture';

describe('the change feed on clients with their own options', function () {
  this.timeout(30_000);

  for (const timeoutMS of [0, 800]) {
    it(`a waiter on a client with timeoutMS ${timeoutMS} (client-side operation timeout) acquires once the holder releases, as it does without change streams`, async function () {
      requireCapability(this, 'changeStreams');
      const collection = await freshCollection([{ _id: 1 }]);
      const client = await newClient({ timeoutMS });
      const waiterSide = client.db(collection.dbName).collection(collection.collectionName);
      const holder = writeLock({ collection, locktimeout: 10_000 });
      const outcomes: string[] = [];
      for (const changeStreams of [false, true]) {
        const waiter = writeLock({ collection: waiterSide, locktimeout: 10_000, changeStreams });
        const held = await holder.acquire({ _id: 1 });
        const releasing = new Promise((resolve) => setTimeout(resolve, 200)).then(() => held.release());
        try {
          const won = await waiter.acquire({ _id: 1 }, { wait: 5_000 });
          outcomes.push(`changeStreams ${changeStreams}: acquired (fence ${won.fence})`);
          await won.release();
        } catch (error) {
          outcomes.push(`changeStreams ${changeStreams}: ${(error as Error).name}: ${(error as Error).message}`);
        }
        await releasing;
      }
      expect(outcomes.map((outcome) => outcome.replace(/ \(fence \d+\)/, '').replace(/^changeStreams \w+: /, '')), outcomes.join('; ')).to.deep.equal(['acquired', 'acquired']);
    });
  }
});
