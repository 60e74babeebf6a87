/**
 * minHold in fair mode: waiters with tickets (here and in other clients) behind a lock released
 * before its minimum hold ends. None may hold it before the hold ends; each one is woken and gets
 * it in turn (none left waiting), also a waiter that asks for minHold itself (no hand-over).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { freshCollection, newClient } from '../support/fixture';

async function viaNewClient(collection: Collection): Promise<Collection<Document>> {
  return (await newClient()).db(collection.dbName).collection(collection.collectionName);
}

describe('minHold and fair waiters', function () {
  this.timeout(30_000);

  it('fair waiters here and in two other clients get the lock only after the hold ends, each in turn, none left waiting', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const here = writeLock({ collection, locktimeout: 5_000, fair: true });
    const others = await Promise.all([viaNewClient(collection), viaNewClient(collection)]);
    const locks = [here, here, ...others.map((c) => writeLock({ collection: c, locktimeout: 5_000, fair: true }))];
    const held = await here.acquire({ _id: 1 }, { minHold: 1_200 });
    const spans: Array<[number, number]> = [];
    const waiting = locks.map((lock, i) =>
      lock.acquire({ _id: 1 }, { wait: 15_000, ...(i === 1 && { minHold: 300 }) }).then(async (handle) => {
        const start = Date.now();
        await new Promise((resolve) => setTimeout(resolve, 50));
        await handle.release();
        spans.push([start, Date.now()]);
        return handle.timestamp;
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    await held.release();
    const stamps = await Promise.all(waiting);
    for (const stamp of stamps) expect(stamp, 'stamped once the minimum hold ended').to.be.at.least(held.minHoldUntil!);
    expect(stamps).to.have.length(4);
  });
});
