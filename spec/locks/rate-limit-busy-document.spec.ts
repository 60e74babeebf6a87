/**
 * A rate limit (semaphore permits taken with minHold) on a document that other holders write often:
 * a permit's acquisition requires the document's `judged` stamp at or below its own (b329ad3), and
 * every extension raises `judged` to its stamp. A client whose commands take longer on their way
 * (its stamps lag another client's) is refused while permits are free: SemaphoreFull "held when
 * the update ran", 1 of 50 permits taken. FAILS on 75cff56 (both cases: every call without wait is
 * refused, and a call waiting 3 s too); passes with notJudgedAfter removed from the acquisition
 * filter (probe, not committed). Third case (FAILS on 75cff56 too): a run-once multiLock tag beside
 * another tag that is held and extended is refused CooperativeLock "held when the update ran", 4 of 4.
 */
import { expect } from 'chai';
import { multiLock, semaphore } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient } from '../support/fixture';

describe('a rate limit on a document another client keeps extending', function () {
  this.timeout(60_000);

  it('a slower client (40 ms on the way) gets free permits without waiting while another client extends its permit every 20 ms', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const otherClient = await newClient();
    const busy = semaphore({ collection: otherClient.db(collection.dbName).collection(collection.collectionName), limit: 50, locktimeout: 5_000 });
    const slow = semaphore({ collection: delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' ? 40 : undefined) }), limit: 50, locktimeout: 5_000 });
    const permit = await busy.acquire({ _id: 1 }, { minHold: 1_000 });
    let extending = true;
    const loop = (async () => {
      while (extending) await permit.extend(2_000).then(() => new Promise((resolve) => setTimeout(resolve, 20)));
    })();
    const outcomes: string[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        outcomes.push(
          await slow.acquire({ _id: 1 }, { minHold: 1_000 }).then(
            () => 'acquired',
            (error: { subtype?: string; message?: string }) => `refused: ${error.subtype} (${error.message})`,
          ),
        );
      }
    } finally {
      extending = false;
      await loop;
    }
    expect(outcomes.filter((o) => o !== 'acquired'), 'permits are free: 1 + 6 of 50').to.deep.equal([]);
  });

  it('the same slower client waiting (wait: 3 s) gets a free permit', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const otherClient = await newClient();
    const busy = semaphore({ collection: otherClient.db(collection.dbName).collection(collection.collectionName), limit: 50, locktimeout: 5_000 });
    const slow = semaphore({ collection: delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' ? 40 : undefined) }), limit: 50, locktimeout: 5_000 });
    const permit = await busy.acquire({ _id: 1 }, { minHold: 1_000 });
    let extending = true;
    const loop = (async () => {
      while (extending) await permit.extend(2_000).then(() => new Promise((resolve) => setTimeout(resolve, 20)));
    })();
    const started = Date.now();
    const outcome = await slow.acquire({ _id: 1 }, { minHold: 1_000, wait: 3_000 }).then(
      () => 'acquired',
      (error: { subtype?: string; message?: string }) => `refused after ${Date.now() - started} ms: ${error.subtype} (${error.message})`,
    );
    extending = false;
    await loop;
    expect(outcome).to.equal('acquired');
  });

  it('a run-once multiLock tag (minHold 100 ms) beside another tag held and extended every 20 ms: the slower client runs it, free, without waiting', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const options = { locktimeouts: { job: 5_000, other: 5_000 }, lockRelationships: { job: { cooperative: ['job'] }, other: { cooperative: ['other'] } } };
    const otherClient = await newClient();
    const busy = multiLock({ collection: otherClient.db(collection.dbName).collection(collection.collectionName), ...options });
    const slow = multiLock({ collection: delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' ? 40 : undefined) }), ...options });
    const held = await busy.acquire({ _id: 1 }, { tag: 'other' });
    let extending = true;
    const loop = (async () => {
      while (extending) await held.extend(2_000).then(() => new Promise((resolve) => setTimeout(resolve, 20)));
    })();
    const outcomes: string[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        outcomes.push(
          await slow.acquire({ _id: 1 }, { tag: 'job', minHold: 100 }).then(
            async (handle) => (await handle.release(), await new Promise((resolve) => setTimeout(resolve, 150)), 'acquired'),
            (error: { subtype?: string; message?: string }) => `refused: ${error.subtype} (${error.message})`,
          ),
        );
      }
    } finally {
      extending = false;
      await loop;
    }
    expect(outcomes.filter((o) => o !== 'acquired'), 'tag job is free: its runs are 250 ms apart').to.deep.equal([]);
  });
});
