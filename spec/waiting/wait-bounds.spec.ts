/**
 * A waiting call's `wait` and `signal` count from the call: one turn passes before it sends
 * anything (an abort in the turn of the call sends nothing), a call queued behind a waiter of its
 * own process gives up when its wait runs out (not after a sleep, nor again from when its ticket
 * came back, nor after a clock set back), and a bluebird `.cancel()` in the turn of the call
 * releases the lock its first attempt won.
 */
import Bluebird from 'bluebird';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { MAX_RETRY_DELAY } from '../../lib/waiting/wait-options';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { freshCollection, sleep } from '../support/fixture';
import { isAcquisition, isTicketTake, queueOf, settleTime, whatAnAcquisitionGets } from '../support/lock-commands';

/** `collection` with its lock writes recorded, and the replies of acquisitions held back `replyMs`. */
function recorded(collection: Collection<Document>, replyMs: number): { proxy: Collection<Document>; sent: string[] } {
  const sent: string[] = [];
  const proxy = delayedCollection(collection, {
    request: (method, _n, args) => {
      if (method === 'findOneAndUpdate' || method === 'updateOne') sent.push(isAcquisition(method, args) ? 'acquisition' : method);
      return undefined;
    },
    reply: (method, _n, args) => (isAcquisition(method, args) ? replyMs : undefined),
  });
  return { proxy, sent };
}

describe('a waiting call aborted in the turn it was made', () => {
  for (const fair of [true, false]) {
    it(`${fair ? 'fair' : 'not fair'}: acquire(..., { wait, signal }) then signal.abort() in the same turn: it sends nothing, and the document stays free`, async function () {
      this.timeout(10_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const { proxy, sent } = recorded(collection, 300);
      const lock = writeLock({ collection: proxy, locktimeout: 10_000, fair });
      await (await lock.acquire({ _id: 1 })).release(); // warm: the connection is open, the server's clock known
      sent.length = 0;
      const controller = new AbortController();
      const started = realNow();
      const pending = lock.acquire({ _id: 1 }, { wait: 5_000, signal: controller.signal });
      controller.abort(new Error('gave up'));
      expect(await settleTime(pending, started)).to.match(/^Error after \d ms$/);
      // Right after the call rejected: another caller (without waiting) should find the document free.
      const other = await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 });
      await sleep(400);
      expect({ sent, other }, 'writes sent by the aborted call; what another caller got right after it rejected').to.deep.equal({ sent: [], other: 'acquired' });
      expect(await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 }), 'later').to.equal('acquired');
    });
  }
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

describe('wait bounds a call queued behind a waiter of its own process', () => {
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

  for (const stepBackMs of [0, 1_000]) {
    it(`fair, slow ticket take${stepBackMs ? ', the clock option set back 1 s meanwhile (an NTP step)' : ''}: wait counts from the call, not again from when its ticket came back`, async function () {
      this.timeout(20_000);
      let stepBack = 0;
      const { lock, delays, finish } = await queuedBehindOne(() => realNow() - stepBack);
      delays.takeReply = 300; // the second caller's ticket comes back after 300 ms of its 500 ms wait
      const step = setTimeout(() => (stepBack = stepBackMs), 150);
      const started = realNow();
      const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 500 }), started);
      clearTimeout(step);
      await finish();
      expect(outcome).to.match(/^LockAlreadyTaken/);
      expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), outcome).to.be.below(500 + 150);
    });
  }
});

describe('bluebird: acquire(...).cancel() in the turn of the call', () => {
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
