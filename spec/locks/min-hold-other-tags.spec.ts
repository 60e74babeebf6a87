/**
 * A multiLock whose tags include a rate-limited one (limits + minHold) or a run-once job tag
 * (minHold): acquisitions of its *other* tags prune expired entries at their own stamps, which are
 * not ordered with the limited (or job) tag's stamps. A permit's (or a kept job's) entry pruned by
 * a stamp past its end is then missing for an acquisition of its own tag stamped before that end
 * which lands later (its command was on its way): a second permit (a second run) within the window.
 */
import { expect } from 'chai';
import { multiLock } from '../../lib';
import { freshCollection, newClient, sleep } from '../support/fixture';
import { isAcquisition } from '../support/lock-commands';
import { realNow } from '../support/clock';
import { delayedCollection } from '../../stress/delayed-collection';

const sleepUntil = async (ms: number): Promise<void> => sleep(Math.max(0, ms - realNow()));

/** What the second acquisition got: its stamp's distance from the first, or its refusal. */
const outcomeOf = (acquisition: Promise<{ timestamp: number; release(): Promise<void> }>, first: number): Promise<string> =>
  acquisition.then(
    async (handle) => {
      await handle.release();
      return `acquired, stamped ${handle.timestamp - first} ms after the first`;
    },
    (error: { subtype?: string; message?: string }) => `refused: ${error.subtype ?? error.message}`,
  );

describe('minHold on a multiLock: acquisitions of other tags prune by their own stamps', () => {
  for (const [name, tag, options] of [
    ['rate limit (limit 1 per W): no second permit stamped within W', 'api', { locktimeouts: { api: 10_000, job: 10_000 }, limits: { api: 1 }, lockRelationships: { job: { cooperative: ['job'] } } }],
    ['run-once tag (exclusive, minHold W): no second run stamped within W', 'run', { locktimeouts: { run: 10_000, job: 10_000 }, lockRelationships: { run: { cooperative: ['run'] }, job: { cooperative: ['job'] } } }],
  ] as const) {
    it(`${name}, when another tag's acquisition stamped past the kept entry's end lands before it`, async function () {
      this.timeout(20_000);
      const W = 400;
      const collection = await freshCollection([{ _id: 1 }]);
      const mine = multiLock({ collection, ...options } as Parameters<typeof multiLock>[0]);
      // Another client whose acquisitions of `tag` are held 90 ms on the way to the server, after they were stamped.
      const client = await newClient();
      const slow = delayedCollection(client.db(collection.dbName).collection(collection.collectionName), {
        request: (method, _n, args) => (isAcquisition(method, args) && JSON.stringify(args[1]).includes(`tags.${tag}`) ? 90 : 0),
      });
      const theirs = multiLock({ collection: slow, ...options } as Parameters<typeof multiLock>[0]);
      await theirs.inspect({ _id: 1 }); // its clock and deployment known
      const first = await mine.acquire({ _id: 1 }, { tag, minHold: W });
      await first.release(); // kept until first.timestamp + W
      await sleepUntil(first.timestamp + W - 50);
      const second = outcomeOf(theirs.acquire({ _id: 1 }, { tag, minHold: W }), first.timestamp); // stamped ~50 ms before the end, lands ~40 ms after
      await sleepUntil(first.timestamp + W + 15);
      await (await mine.acquire({ _id: 1 }, { tag: 'job' })).release(); // stamped past the end: prunes the kept entry
      const got = await second;
      if (got.startsWith('acquired')) expect(Number(/stamped (-?\d+) ms/.exec(got)![1]), got).to.be.at.least(W);
      await client.close();
    });
  }
});
