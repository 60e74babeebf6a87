/**
 * A lock taken with minHold, released or extended by lock data passed back (`{ lock }` params)
 * that does not carry `minHoldUntil` (a caller's own serialization: `{ id, tag }` names the lock,
 * and is accepted as proof): the stored `hold` is the minimum hold's end, whatever the caller's
 * data says, so neither may end the minimum hold early.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { semaphore, writeLock } from '../../lib';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';
import { gate } from '../support/lock-commands';
import { delayedCollection } from '../../stress/delayed-collection';

/** What another acquisition gets: its stamp's distance from `first`, or its refusal. */
const outcomeOf = (acquisition: Promise<{ timestamp: number; release(): Promise<void> }>, first: number): Promise<string> =>
  acquisition.then(
    async (handle) => {
      await handle.release().catch(() => undefined);
      return `acquired, stamped ${handle.timestamp - first} ms after the first`;
    },
    (error: { subtype?: string; message?: string }) => `refused: ${error.subtype ?? error.message}`,
  );

describe('minHold with lock data passed back without minHoldUntil', () => {
  it('writeLock: a release by { lock: { id, tag } } before the minimum hold ends does not end it (the job does not run twice)', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    const released = await lock.release({ _id: 1 }, { lock: { id: held.id, tag: held.tag } as never }).then(
      () => 'released',
      (error: { subtype?: string }) => `refused: ${error.subtype}`,
    );
    const second = await outcomeOf(lock.acquire({ _id: 1 }), held.timestamp);
    expect({ released, second }).to.deep.include({ second: 'refused: LockAlreadyTaken' });
  });

  it('writeLock: a release by { lock: { id, tag } } with a waiter of the same lock is not handed over within the minimum hold', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 5_000 });
    const waiting = outcomeOf(lock.acquire({ _id: 1 }, { wait: 1_500 }), held.timestamp);
    await new Promise((resolve) => setTimeout(resolve, 200)); // the waiter is waiting
    await lock.release({ _id: 1 }, { lock: { id: held.id, tag: held.tag } as never }).catch(() => undefined);
    expect(await waiting).to.equal('refused: LockAlreadyTaken');
  });

  it('writeLock: a commit by { lock: { id, tag } } still on its way when its call gives up is settled, and the entry is kept until the minimum hold ends, not removed', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1, done: false }]);
    const late = gate(); // the commit (the first updateOne) reaches the server only after the call's deadline and the settling write
    const slow = delayedCollection(collection, { request: (method, n) => (method === 'updateOne' && n === 1 ? late.promise : 0) });
    const lock = writeLock({ collection: slow, locktimeout: 15_000, timeout: 2_000 });
    const held = await lock.acquire({ _id: 1 }, { minHold: 15_000 });
    const error = await rejectionOf(lock.release({ _id: 1 }, { lock: { id: held.id, tag: held.tag } as never, update: { $set: { done: true } } }));
    late.open();
    await sleep(300);
    expect({ subtype: error.subtype, done: (await collection.findOne({ _id: 1 } as Document))!.done }).to.deep.equal({ subtype: 'DbError', done: false });
    const second = await outcomeOf(writeLock({ collection }).acquire({ _id: 1 }), held.timestamp);
    expect(second, 'the minimum hold is not ended by a lost reply').to.equal('refused: LockAlreadyTaken');
  });

  it('semaphore (rate limit 1 per 5 s): an extension by { lock: { id, tag } } to 300 ms does not end the permit before its window', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const limiter = semaphore({ collection, limit: 1, locktimeout: 60_000 });
    const permit = await limiter.acquire({ _id: 1 }, { minHold: 5_000 });
    const extended = await limiter.extend({ _id: 1 }, { lock: { id: permit.id, tag: permit.tag } as never, locktimeout: 300 }).then(
      () => 'extended',
      (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.name}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    const second = await outcomeOf(limiter.acquire({ _id: 1 }, { minHold: 5_000 }), permit.timestamp);
    expect({ extended, second }).to.deep.include({ second: 'refused: SemaphoreFull' });
  });
});
