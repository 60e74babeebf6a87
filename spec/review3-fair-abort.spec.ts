/**
 * Review 3: fair waiters' ticket writes hold up an abort and overrun `wait`.
 *
 * - document-lock.ts `acquire`: `finally { dispose(); await place.leave(won !== undefined); }`, and
 *   WaitingPlace.leave awaits `dropTicket` (an updateOne, bounded only by `timeout`) before the
 *   call settles. An aborted (or timed-out) fair waiter therefore rejects only once the ticket's
 *   removal has come back, not "at once with signal.reason" (README, Waiting).
 * - `place.start(userFilter)` runs before `retryWithin`/`race`: a fair waiter that queues behind
 *   a waiter of its own process takes its ticket there (takeTicket, up to 3 stamped attempts),
 *   with neither the signal nor the `wait` deadline watching: the abort is noticed, and the wait
 *   starts counting, only after the ticket's reply.
 *
 * The slow ticket writes are modelled by a collection wrapper that holds back the replies to the
 * writes of `lock.queue` (a slow primary, a congested link): the lock's own writes are not delayed.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

/** `collection`, whose writes of `lock.queue` (takeTicket's $push, dropTicket's lone $pull) reply `ms` late. */
function slowTickets(collection: Collection<Document>, ms: { take?: number; drop?: number }): Collection<Document> {
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property !== 'findOneAndUpdate' && property !== 'updateOne') return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const update = args[1] as Document;
        const take = property === 'findOneAndUpdate' && update.$push && 'lock.queue' in (update.$push as Document);
        const drop = property === 'updateOne' && Object.keys(update).length === 1 && update.$pull && 'lock.queue' in (update.$pull as Document);
        const hold = take ? (ms.take ?? 0) : drop ? (ms.drop ?? 0) : 0;
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (hold > 0) await sleep(hold); // the server has applied it; its reply is slow to come back
        return result;
      };
    },
  });
}

function settleTime(promise: Promise<unknown>, since: number): Promise<string> {
  return promise.then(
    () => `resolved after ${Math.round(realNow() - since)} ms`,
    (error: Error & { subtype?: string }) => `${error.subtype ?? error.name} after ${Math.round(realNow() - since)} ms`,
  );
}

describe('review 3 (fixed): a fair waiter\'s ticket writes and its abort or wait', () => {
  it('an aborted fair waiter rejects at once, not after its ticket\'s removal came back', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
    const lock = writeLock({ collection: slowTickets(collection, { drop: 3_000 }), locktimeout: 10_000, fair: true });
    const start = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 10_000, signal: AbortSignal.timeout(500) }), start);
    console.log(`      ${outcome}`);
    await holder.release();
    expect(outcome).to.match(/^TimeoutError after/);
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), 'ms until the abort (at 500 ms) was reported').to.be.below(800);
  });

  it('a fair waiter whose wait runs out rejects when it runs out, not after its ticket\'s removal came back', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
    const lock = writeLock({ collection: slowTickets(collection, { drop: 3_000 }), locktimeout: 10_000, fair: true });
    const start = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 500 }), start);
    console.log(`      ${outcome}`);
    await holder.release();
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), 'ms until a wait of 500 ms gave up').to.be.below(800);
  });

  it('a fair waiter queued behind one of its process is aborted while its ticket is being taken', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
    const lock = writeLock({ collection: slowTickets(collection, { take: 3_000 }), locktimeout: 10_000, fair: true });
    const first = lock.acquire({ _id: 1 }, { wait: 10_000 }).catch(() => undefined);
    await sleep(50);
    const start = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 10_000, signal: AbortSignal.timeout(300) }), start);
    console.log(`      ${outcome}`);
    await holder.release();
    await first.then((handle) => handle?.release());
    expect(outcome).to.match(/^TimeoutError after/);
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), 'ms until the abort (at 300 ms) was reported').to.be.below(600);
  });

  it('a fair waiter queued behind one of its process gives up when its wait runs out', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
    const lock = writeLock({ collection: slowTickets(collection, { take: 3_000 }), locktimeout: 10_000, fair: true });
    const first = lock.acquire({ _id: 1 }, { wait: 10_000 }).catch(() => undefined);
    await sleep(50);
    const start = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 300 }), start);
    console.log(`      ${outcome}`);
    await holder.release();
    await first.then((handle) => handle?.release());
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), 'ms until a wait of 300 ms gave up').to.be.below(600);
  });
});
