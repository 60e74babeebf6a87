import { expect } from 'chai';
import type { Document } from 'mongodb';
import { election } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../support/fixture';

describe('election under slow lock commands', () => {
  it('leaders whose renewals and acquisitions are delayed past their lease: guarded writes of two terms never interleave, tokens grow, a term whose write failed had lost its lead', async function () {
    this.timeout(90_000);
    const collection = await freshCollection([{ _id: 'x', log: [] }]);
    const lease = 500;
    let seed = 7;
    const random = (): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const clients = await Promise.all(Array.from({ length: 4 }, () => newClient()));
    const refusedWhileSignalLive: string[] = [];
    let lost = 0;
    await Promise.all(
      clients.map(async (client, who) => {
        const slow = delayedCollection(client.db(collection.dbName).collection(collection.collectionName) as never, {
          // Lock commands held on the way there (the server executes them late): now and then past the lease.
          request: (method) => (method === 'findOneAndUpdate' || method === 'bulkWrite' || method === 'updateOne' ? (random() < 0.25 ? 300 + random() * 400 : random() * 40) : undefined),
        });
        const elections = election({ collection: slow as never, lease });
        const own = client.db(collection.dbName).collection<Document>(collection.collectionName);
        for (let round = 0; round < 3; round++) {
          const term = await elections.campaign({ _id: 'x' }, { value: who });
          for (let step = 0; step < 12; step++) {
            const written = await own.updateOne({ _id: 'x' as never, ...term.guard() }, { $push: { log: { who, fence: term.fence, step } } as never });
            if (written.matchedCount === 0) {
              lost++;
              await sleep(lease); // its keeper's timer has run by now
              if (!term.signal.aborted) refusedWhileSignalLive.push(`${who} fence ${term.fence} step ${step}`);
              break;
            }
            await sleep(80);
          }
          await term.resign().catch(() => undefined);
        }
      }),
    );
    const log = ((await collection.findOne({ _id: 'x' as never }))?.log ?? []) as Array<{ who: number; fence: number; step: number }>;
    console.log(`      ${log.length} guarded writes landed; ${lost} refused (terms that had lost their lead)`);
    expect(log.length).to.be.above(0);
    const finished = new Set<number>();
    for (let i = 1; i < log.length; i++) {
      const [before, after] = [log[i - 1]!, log[i]!];
      if (after.fence !== before.fence) {
        expect(after.fence, `token order at ${i}`).to.be.above(before.fence);
        finished.add(before.fence);
      }
      expect(finished.has(after.fence), `a write of term ${after.fence} after a later term's`).to.equal(false);
    }
    expect(refusedWhileSignalLive, 'a guarded write refused while the term\'s signal stays live a lease later').to.deep.equal([]);
    await Promise.all(clients.map((client) => client.close()));
  });
});
