/**
 * writeLock `release`/`extend`: a proof is a proof wherever `params` keeps it. A `params` object
 * whose `lock` is inherited (made with `Object.create(defaults)`, or a class with a `lock` getter)
 * names the lock the caller means; read as "no proof", it becomes v2's forced release and takes
 * away whatever lock holds the document now, another holder's included.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

describe('writeLock: a proof that params inherits', () => {
  const shapes = {
    'Object.create({ lock })': (lock: unknown): object => Object.create({ lock }) as object,
    'a class with a `lock` getter': (lock: unknown): object =>
      new (class CheckinParams {
        get lock(): unknown {
          return lock;
        }
      })(),
  };
  for (const [shape, paramsOf] of Object.entries(shapes)) {
    it(`release with ${shape} naming a lock that expired does not release the lock another holder took since`, async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 100 });
      const expired = await lock.acquire({ _id: 1 });
      await sleep(300);
      const holder = await lock.acquire({ _id: 1 }, { locktimeout: 10_000 });
      const error = await rejectionOf(lock.release({ _id: 1 }, paramsOf(expired.toJSON()) as never)).catch((caught: unknown) => caught);
      const stored = ((await collection.findOne({ _id: 1 as never }))?.lock?.tags?.write ?? []) as Array<{ id: string }>;
      expect(stored.map((entry) => entry.id), `the current holder ${holder.id} still holds the lock after a release naming the expired ${expired.id} (${String(error)})`).to.deep.equal([holder.id]);
      expect(error, 'the release is refused (its lock is gone), or the params refused').to.be.instanceOf(Error);
    });
  }
});
