/**
 * Fair waiters refused with Quarantined leave no ticket that outlives their call: once the mark
 * is cleared, a fair acquisition of the free document is not refused for waiters that came first.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, writeLock } from '../../lib';
import { freshCollection, newClient, sleep } from '../support/fixture';

async function viaNewClient(collection: Collection): Promise<Collection<Document>> {
  return (await newClient()).db(collection.dbName).collection(collection.collectionName);
}

describe('quarantine and fair tickets', function () {
  this.timeout(30_000);

  it('after fair waiters (here and in another client) were refused Quarantined and the mark cleared, the free document is acquired at once', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const here = writeLock({ collection, locktimeout: 10_000, fair: true });
    const there = writeLock({ collection: await viaNewClient(collection), locktimeout: 10_000, fair: true });
    const held = await here.acquire({ _id: 1 });
    const waiters = [here, there].map((lock) => lock.acquire({ _id: 1 }, { wait: 10_000 }).then(() => 'acquired', (error: Error) => (isLockError(error, 'Quarantined') ? 'Quarantined' : error.message)));
    await sleep(300);
    await held.quarantine({ reason: 'bad' });
    expect(await Promise.all(waiters)).to.deep.equal(['Quarantined', 'Quarantined']);
    expect(await here.clearQuarantine({ _id: 1 })).to.equal(true);
    const third = writeLock({ collection: await viaNewClient(collection), locktimeout: 10_000, fair: true });
    const outcome = await third.acquire({ _id: 1 }).then(
      async (handle) => (await handle.release(), 'acquired'),
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    const doc = await collection.findOne({ _id: 1 as never });
    expect(outcome, JSON.stringify(doc?.lock?.queue)).to.equal('acquired');
  });
});
