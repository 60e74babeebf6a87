import { expect } from 'chai';
import { election, type Term } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../support/fixture';

/**
 * Issue 41 §1: a campaign "waits until this caller leads (forever unless `wait` or the signal ends
 * it)". Here the election's document is deleted three times while one campaign waits, and each time
 * another campaigner creates it again and leads before the waiting one gets to it.
 */
describe('election: a campaign waiting (forever) while its document is deleted again and again', () => {
  it('goes on waiting, and leads once the lead is free', async function () {
    this.timeout(30_000);
    const collection = await freshCollection();
    const lease = 3_000;
    const client = await newClient();
    // The waiting campaigner's calls: each of its acquisition attempts and creating upserts can be held at the door.
    let trap: { method: string; reached: () => void; gate: Promise<void> } | undefined;
    const arm = (method: string): { reached: Promise<void>; open: () => void } => {
      let reached: () => void = () => undefined;
      let open: () => void = () => undefined;
      const whenReached = new Promise<void>((resolve) => (reached = resolve));
      const gate = new Promise<void>((resolve) => (open = resolve));
      trap = { method, reached, gate };
      return { reached: whenReached, open };
    };
    const waiterCollection = delayedCollection(client.db(collection.dbName).collection(collection.collectionName) as never, {
      request: (method: string) => {
        if (!trap || trap.method !== method) return undefined;
        const held = trap;
        trap = undefined;
        held.reached();
        return held.gate;
      },
    });
    const waiterElection = election({ collection: waiterCollection as never, lease });
    const leaders = election({ collection, lease });
    let current: Term = await leaders.campaign({ _id: 'x' }, { value: 'leader 0' });
    let outcome: { term?: Term; error?: unknown } | undefined;
    const waiting = waiterElection.campaign({ _id: 'x' }, { value: 'waiter' }).then(
      (term) => (outcome = { term }),
      (error: unknown) => (outcome = { error }),
    );
    await sleep(300); // it waits: the lead is taken
    for (let round = 1; round <= 3 && outcome === undefined; round++) {
      // Its next attempt is held; meanwhile the document goes.
      const attempt = arm('findOneAndUpdate');
      await attempt.reached;
      await collection.deleteOne({ _id: 'x' as never });
      const creation = arm('updateOne');
      attempt.open(); // no document: it creates it again...
      await Promise.race([creation.reached, waiting]);
      if (outcome !== undefined) break;
      await current.resign();
      current = await leaders.campaign({ _id: 'x' }, { value: `leader ${round}` }); // ...but another campaigner leads first
      creation.open();
      await sleep(300);
    }
    expect(outcome?.error, `the waiting campaign is still waiting, not rejected (${String(outcome?.error)})`).to.equal(undefined);
    await current.resign();
    await waiting;
    expect(outcome?.term?.value).to.equal('waiter');
    await outcome?.term?.resign();
    await client.close();
  });
});
