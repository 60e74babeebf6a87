/**
 * A rate limit (semaphore permits taken with minHold), or a run-once tag, on a document another
 * client writes often: its extensions prune the other tags' expired entries and raise `judged`.
 * A client whose commands take longer on their way (its stamps lag the other's) must still get
 * what is free. A first version required `judged` at or below the acquisition's stamp: every call
 * of the slower client was refused (SemaphoreFull or CooperativeLock "held when the update ran"),
 * waiting ones too; now the other tags' prunes never remove an entry taken with minHold
 * (lib/protocol/stored-format.ts, pruneTags), and nothing else is asked.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, semaphore, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient } from '../support/fixture';

/**
 * Runs `body` with the collection as a slower client sees it (its findAndModify 40 ms on the way),
 * while the lock `held(busyCollection)` takes through another client is extended every 20 ms.
 */
async function besideABusyHolder<T>(held: (busy: Collection<Document>) => Promise<LockHandle>, body: (slow: Collection<Document>) => Promise<T>): Promise<T> {
  const collection = await freshCollection([{ _id: 1 }]);
  const otherClient = await newClient();
  const handle = await held(otherClient.db(collection.dbName).collection(collection.collectionName));
  let extending = true;
  const loop = (async () => {
    while (extending) await handle.extend(2_000).then(() => new Promise((resolve) => setTimeout(resolve, 20)));
  })();
  try {
    return await body(delayedCollection(collection, { request: (method) => (method === 'findOneAndUpdate' ? 40 : undefined) }));
  } finally {
    extending = false;
    await loop;
  }
}

const outcomeOf = (acquired: Promise<unknown>): Promise<string> =>
  acquired.then(
    () => 'acquired',
    (error: { subtype?: string; message?: string }) => `refused: ${error.subtype} (${error.message})`,
  );

describe('a rate limit on a document another client keeps extending', function () {
  this.timeout(60_000);
  const permits = (collection: Collection<Document>) => semaphore({ collection, limit: 50, locktimeout: 5_000 });

  it('a slower client (40 ms on the way) gets free permits without waiting while another client extends its permit every 20 ms', async () => {
    const outcomes = await besideABusyHolder(
      (busy) => permits(busy).acquire({ _id: 1 }, { minHold: 1_000 }),
      async (slow) => {
        const seen: string[] = [];
        const slowPermits = permits(slow);
        for (let i = 0; i < 6; i++) seen.push(await outcomeOf(slowPermits.acquire({ _id: 1 }, { minHold: 1_000 })));
        return seen;
      },
    );
    expect(outcomes.filter((o) => o !== 'acquired'), 'permits are free: 1 + 6 of 50').to.deep.equal([]);
  });

  it('the same slower client waiting (wait: 3 s) gets a free permit', async () => {
    const outcome = await besideABusyHolder(
      (busy) => permits(busy).acquire({ _id: 1 }, { minHold: 1_000 }),
      (slow) => outcomeOf(permits(slow).acquire({ _id: 1 }, { minHold: 1_000, wait: 3_000 })),
    );
    expect(outcome).to.equal('acquired');
  });

  it('a run-once multiLock tag (minHold 100 ms) beside another tag held and extended every 20 ms: the slower client runs it, free, without waiting', async () => {
    const options = { locktimeouts: { job: 5_000, other: 5_000 }, lockRelationships: { job: { cooperative: ['job'] }, other: { cooperative: ['other'] } } };
    const outcomes = await besideABusyHolder(
      (busy) => multiLock({ collection: busy, ...options }).acquire({ _id: 1 }, { tag: 'other' }),
      async (slow) => {
        const seen: string[] = [];
        const jobs = multiLock({ collection: slow, ...options });
        for (let i = 0; i < 4; i++) {
          seen.push(await outcomeOf(jobs.acquire({ _id: 1 }, { tag: 'job', minHold: 100 }).then((handle) => handle.release())));
          await new Promise((resolve) => setTimeout(resolve, 150));
        }
        return seen;
      },
    );
    expect(outcomes.filter((o) => o !== 'acquired'), 'tag job is free: its runs are 250 ms apart').to.deep.equal([]);
  });
});
