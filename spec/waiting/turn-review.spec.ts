import Bluebird from 'bluebird';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { isAcquisition, queueOf, settleTime, whatAnAcquisitionGets } from '../support/lock-commands';
import { freshCollection, sleep } from '../support/fixture';
import { MAX_RETRY_DELAY } from '../../lib/waiting/wait-options';

/*
 * A second independent review of 84581fe, f7390e1 and 4553371 (one turn before anything is sent;
 * callers that come together send in the order they came; `wait` counts from the call). On a held
 * document, the first of callers that came together was served last (its ticket was taken after
 * its refused attempt, the others' at once): a ticket now keeps the place of when its waiter came. The `wait`
 * tests failed on 4553371 and on ed034fd (before the three commits): a call queued behind a waiter
 * of its own process slept 150 ms before its first attempt whatever its wait, and a clock set back
 * during its ticket take gave it its whole wait again. The bluebird test checks what the docs now
 * say: a `.cancel()` in the turn of the call comes after the first attempt was sent (bluebird runs
 * its cancellation callback a `setImmediate` later), and the lock that attempt won is released.
 */

const isTicketTake = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && 'lock.queue' in (((args[1] as Document).$push ?? {}) as Document);

describe('fair mode: callers that come together in one process are served in the order they came (review)', () => {
  /** Callers 0..3 call `acquire(i)` in that order, in one turn, on one fair lock object; the order they were served in. */
  async function servedOrder(collection: Collection<Document>, acquire: (i: number) => Promise<{ release(): Promise<void> }>, then?: () => Promise<void>): Promise<string> {
    const served: number[] = [];
    const callers = Array.from({ length: 4 }, async (_, i) => {
      const handle = await acquire(i);
      served.push(i);
      await handle.release();
    });
    await then?.();
    await Promise.all(callers);
    return served.join(',');
  }

  it('on a held document: the first caller, refused at its first attempt, is served first (not last)', async function () {
    this.timeout(30_000);
    const rounds: string[] = [];
    for (let round = 0; round < 5; round++) {
      const collection = await freshCollection([{ _id: 'held' }]);
      const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
      await (await lock.acquire({ _id: 'held' })).release(); // the server's clock is known, as in a running service
      const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 'held' });
      rounds.push(
        await servedOrder(collection, () => lock.acquire({ _id: 'held' }, { wait: 10_000 }), async () => {
          await sleep(300); // every caller waits
          await holder.release();
        }),
      );
      expect(await queueOf(collection, 'held'), 'every ticket was taken out').to.deep.equal([]);
    }
    // The first caller's attempt is refused (the document is held); its ticket, taken after the
    // others', keeps the place of when it came. (Before: 1,2,3,0 in 5 of 5 rounds.)
    expect(rounds.filter((order) => order === '0,1,2,3').length, `order served, per round: ${rounds.join(' | ')}`).to.be.at.least(4);
  });

});

/**
 * A held document, and a fair lock on it (through a collection whose ticket takes answer `delays.takeReply`
 * ms late once set) with one waiter already queued: the next call of `lock` queues behind it. `finish()`
 * stops that waiter and releases the holder.
 */
async function queuedBehindOne(clock?: () => number) {
  const collection = await freshCollection([{ _id: 1 }]);
  const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
  const delays = { takeReply: 0 };
  const proxy = delayedCollection(collection, { reply: (method, _n, args) => (isTicketTake(method, args) && delays.takeReply > 0 ? delays.takeReply : undefined) });
  const lock = writeLock({ collection: proxy, locktimeout: 10_000, fair: true, ...(clock && { clock }) });
  const stop = new AbortController();
  const first = lock.acquire({ _id: 1 }, { wait: 10_000, signal: stop.signal }).catch(() => undefined);
  for (let i = 0; i < 200 && (await queueOf(collection, 1)).length < 1; i++) await sleep(10);
  return {
    lock,
    delays,
    finish: async () => {
      stop.abort();
      await first;
      await holder.release();
    },
  };
}

describe('wait bounds a call queued behind a waiter of its own process (review)', () => {
  for (const fair of [false, true]) {
    it(`${fair ? 'fair' : 'not fair'}: a 20 ms wait behind a local waiter gives up after about 20 ms, not after a 150 ms sleep`, async function () {
      this.timeout(20_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
      const lock = writeLock({ collection, locktimeout: 10_000, fair });
      let started = realNow();
      const alone = await settleTime(lock.acquire({ _id: 1 }, { wait: 20 }), started);
      const stop = new AbortController();
      const first = lock.acquire({ _id: 1 }, { wait: 10_000, signal: stop.signal }).catch(() => undefined);
      await sleep(50); // the first call waits
      started = realNow();
      const behind = await settleTime(lock.acquire({ _id: 1 }, { wait: 20 }), started);
      stop.abort();
      await first;
      await holder.release();
      expect(behind, `the same call with nobody ahead: ${alone}`).to.match(/^LockAlreadyTaken/);
      // api.md: a call can outlast `wait` by one attempt (a few ms on this server: see `alone`).
      expect(Number(/after (\d+) ms/.exec(behind)?.[1]), `behind a local waiter: ${behind}; alone: ${alone}`).to.be.below(MAX_RETRY_DELAY); // before: the 150 ms sleep, then the attempt (152–161 ms)
    });
  }

  it('fair, slow ticket take: what is left of the wait after the take bounds the sleep before the first attempt', async function () {
    this.timeout(20_000);
    const { lock, delays, finish } = await queuedBehindOne();
    delays.takeReply = 280; // the second caller's ticket comes back after 280 ms of its 300 ms wait
    const started = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 300 }), started);
    await finish();
    expect(outcome).to.match(/^LockAlreadyTaken/);
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), outcome).to.be.below(280 + MAX_RETRY_DELAY); // before: the take, the 150 ms sleep, then the attempt (433–438 ms)
  });

  it('fair, the clock option set back during the ticket take: wait still counts from the call', async function () {
    this.timeout(20_000);
    let stepBack = 0;
    const { lock, delays, finish } = await queuedBehindOne(() => realNow() - stepBack);
    delays.takeReply = 300; // the second caller's ticket comes back after 300 ms of its 500 ms wait
    const step = setTimeout(() => (stepBack = 1_000), 150); // an NTP step back of 1 s meanwhile
    const started = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 500 }), started);
    clearTimeout(step);
    await finish();
    expect(outcome).to.match(/^LockAlreadyTaken/);
    // The bound of the review test in first-attempt-review.spec.ts (the same call without the step).
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), outcome).to.be.below(500 + 150);
  });
});

describe('bluebird: acquire(...).cancel() in the turn of the call (review)', () => {
  it('the attempt already sent is released when its reply comes: nothing is left held', async function () {
    this.timeout(10_000);
    const Cancellable = Bluebird.getNewLibraryCopy();
    Cancellable.config({ cancellation: true });
    const collection = await freshCollection([{ _id: 1 }]);
    const sent: string[] = [];
    const proxy = delayedCollection(collection, {
      request: (method, _n, args) => {
        if (method === 'findOneAndUpdate' || method === 'updateOne') sent.push(isAcquisition(method, args) ? 'acquisition' : method);
        return undefined;
      },
      reply: (method, _n, args) => (isAcquisition(method, args) ? 300 : undefined),
    });
    const lock = writeLock({ collection: proxy, locktimeout: 10_000, Promise: Cancellable });
    await (await lock.acquire({ _id: 1 })).release(); // warm: the connection is open, the server's clock known
    sent.length = 0;
    const pending = lock.acquire({ _id: 1 }, { wait: 5_000 });
    pending.cancel();
    await sleep(400); // the acquisition's reply (held back 300 ms) came, and its lock was released
    const other = await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 });
    expect(pending.isCancelled()).to.equal(true);
    expect({ sent, other }, 'writes sent by the cancelled call; what another caller got once its reply came').to.deep.equal({ sent: ['acquisition', 'updateOne'], other: 'acquired' });
  });
});
