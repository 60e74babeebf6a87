/**
 * Review of d95f1ec (fair mode paced by the queue): a fair waiter with live tickets ahead of it
 * only "looks" (renews its ticket, reading the queue) and sends no acquisition attempt. Two cases
 * where an attempt would NOT "only be refused", which the look therefore hides:
 * - an owner's waiting call, once the same owner holds the lock (its attempt is a nested hold,
 *   which bypasses the fair queue by design: lib/protocol/reentry.ts);
 * - a waiter whose filter says more than `{ _id }` (its attempt would say the filter no longer
 *   matches: RessourceNotFound), while the look only renews `{ _id }`.
 * Separate writeLock instances on one collection stand for separate processes.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { delayedCollection, isHandOverCall } from '../../stress/delayed-collection';
import { freshCollection, sleep } from '../support/fixture';
import { acquiredOrRejected, liveTickets, queueOf } from '../support/lock-commands';

async function ticketsReach(collection: Collection<Document>, id: unknown, count: number): Promise<void> {
  for (let tries = 0; tries < 500 && liveTickets(await queueOf(collection, id)) < count; tries++) await sleep(10);
  expect(liveTickets(await queueOf(collection, id)), `${count} live tickets`).to.be.at.least(count);
}

describe('review d95f1ec: a paced fair waiter still tries when an attempt could succeed or fail otherwise', () => {
  it('an owner\'s second waiting call re-enters once the owner holds the lock, though another process\'s ticket came before its own', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'r' }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'r' });
    const owners = writeLock({ collection, locktimeout: 30_000, fair: true }); // the owner's process
    const others = writeLock({ collection, locktimeout: 30_000, fair: true }); // another process
    const events: string[] = [];

    // Tickets in this order: the owner's first call, another process's waiter, the owner's second call.
    const first = owners.acquire({ _id: 'r' }, { owner: 'job-7', wait: 20_000 });
    await ticketsReach(collection, 'r', 1);
    const other = others.acquire({ _id: 'r' }, { wait: 5_000 }).then(
      async (handle) => {
        events.push('other process acquired');
        await handle.release();
      },
      (error: Error & { subtype?: string }) => void events.push(`other process rejected (${error.subtype ?? error.message})`),
    );
    await ticketsReach(collection, 'r', 2);
    const second = owners.acquire({ _id: 'r' }, { owner: 'job-7', wait: 20_000 });
    await ticketsReach(collection, 'r', 3);

    await holder.release();
    const outer = await first; // first in line
    const wonAt = performance.now();
    // The owner's work releases its outer hold once its second call is done (a Promise.all of one owner).
    const inner = await second.then(
      (handle) => (events.push(`owner re-entered after ${Math.round(performance.now() - wonAt)} ms`), handle),
      (error: Error) => (events.push(`owner's second call rejected (${error.message})`), undefined),
    );
    await inner?.release();
    await outer.release();
    await other;

    console.log(`      ${events.join('; ')}`);
    expect(inner?.fence, 'a nested hold, same token').to.equal(outer.fence);
    expect(events[0], 'the owner holds the lock: its second call is a nested hold, the queue cannot order it behind a waiter for its own lock').to.match(/^owner re-entered/);
    expect(events[1], 'the other process gets the lock once the owner is done, within its wait').to.equal('other process acquired');
  });

  it('a fair waiter for { _id, status: "open" } behind another process\'s waiter learns the job was closed without waiting out its whole wait', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'job', status: 'open' }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'job' });
    const others = writeLock({ collection, locktimeout: 30_000, fair: true });
    const mine = writeLock({ collection, locktimeout: 30_000, fair: true });
    const ahead = others.acquire({ _id: 'job' }, { wait: 25_000 }).catch(() => undefined);
    await ticketsReach(collection, 'job', 1);
    const waiter = mine.acquire({ _id: 'job', status: 'open' }, { wait: 12_000 });
    await ticketsReach(collection, 'job', 2);
    await sleep(300);

    await collection.updateOne({ _id: 'job' as never }, { $set: { status: 'done' } }); // the job is closed while the lock is held
    const closedAt = performance.now();
    const outcome = await acquiredOrRejected(waiter);
    const ms = Math.round(performance.now() - closedAt);
    console.log(`      ${outcome} ${ms} ms after the job was closed (wait: 12000 ms)`);
    await holder.release();
    await (await ahead)?.release();
    expect(outcome).to.equal('rejected: RessourceNotFound');
    // Without the look (before d95f1ec), an explained attempt (every 8th) says so within about a second.
    expect(ms, 'ms until the waiter learned its filter no longer matches').to.be.below(5_000);
  });
});

describe('review d95f1ec: fair mode in one process, the hand-over', () => {
  it('each release hands the lock to the waiter whose ticket is then first in the queue (docs/guarantees.md, Fair mode)', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    let handOvers = 0;
    const counted = delayedCollection(collection, {
      request: (method, _n, args) => {
        if (isHandOverCall(method, args)) handOvers++;
        return undefined;
      },
    });
    const lock = writeLock({ collection: counted, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 'hot' });
    const order: number[] = [];
    const waiters: Array<Promise<void>> = [];
    for (let i = 0; i < 3; i++) {
      waiters.push(
        lock.acquire({ _id: 'hot' }, { wait: 20_000 }).then(async (handle) => {
          order.push(i);
          await sleep(30); // a short critical section
          await handle.release();
        }),
      );
      await ticketsReach(collection, 'hot', i + 1); // tickets in this order
    }
    await sleep(500);
    await holder.release();
    await Promise.all(waiters);
    console.log(`      order ${JSON.stringify(order)}, ${handOvers} hand-over(s) for 3 waiters`);
    expect(order).to.deep.equal([0, 1, 2]);
    // Each waiter's ticket is the first in the queue when the release before it comes (the one
    // ahead took its own out when it won): each release hands over in the same write, unless the
    // waiter is not asleep at that moment (a look of its own in flight, about 1 ms in 150): that
    // release is plain and wakes it (docs/guarantees.md, Hand-over). The defect this test found
    // stopped the hand-overs after the first.
    expect(handOvers, 'hand-overs (holder -> 0 -> 1 -> 2)').to.be.at.least(2);
  });
});

/** A ticket renewal (a look, or the background renewal): it sets the expiry of its own ticket in `lock.queue`. */
function isTicketRenewal(method: string, args: readonly unknown[]): boolean {
  const update = (args[1] ?? {}) as Document;
  return method === 'findOneAndUpdate' && Object.keys((update.$set ?? {}) as Document).some((path) => path.includes('queue') && path.endsWith('.$[mine].exp'));
}

describe('review d95f1ec: a look and the wait', () => {
  it('a fair waiter behind another process\'s waiter rejects when its wait runs out, not after a slow look came back', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 1 });
    const ahead = writeLock({ collection, locktimeout: 30_000, fair: true }).acquire({ _id: 1 }, { wait: 20_000 }).catch(() => undefined);
    await ticketsReach(collection, 1, 1);
    // Its ticket renewals reply 3 s late (the server applied them): a slow primary, a congested link.
    const slow = delayedCollection(collection, { reply: (method, _n, args) => (isTicketRenewal(method, args) ? 3_000 : undefined) });
    const lock = writeLock({ collection: slow, locktimeout: 30_000, fair: true });
    const start = performance.now();
    const outcome = await acquiredOrRejected(lock.acquire({ _id: 1 }, { wait: 1_000 }));
    const ms = Math.round(performance.now() - start);
    console.log(`      ${outcome} after ${ms} ms (wait: 1000 ms)`);
    await holder.release();
    await (await ahead)?.release();
    expect(outcome).to.equal('rejected: LockAlreadyTaken');
    expect(ms, 'ms until a wait of 1000 ms gave up').to.be.below(1_800);
  });
});

describe('a look and an abort', () => {
  it('a fair waiter aborted while its look (a renewal that reads the queue) is held back rejects at once, takes its ticket out and holds nothing', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 1 });
    const ahead = writeLock({ collection, locktimeout: 30_000, fair: true }).acquire({ _id: 1 }, { wait: 30_000 });
    await ticketsReach(collection, 1, 1);
    // Its renewals reach the server, and their replies come back 3 s late.
    let lookSent!: () => void;
    const looking = new Promise<void>((resolve) => (lookSent = resolve));
    const slow = delayedCollection(collection, {
      request: (method, _n, args) => void (isTicketRenewal(method, args) && lookSent()),
      reply: (method, _n, args) => (isTicketRenewal(method, args) ? 3_000 : undefined),
    });
    const controller = new AbortController();
    const waiting = writeLock({ collection: slow, locktimeout: 30_000, fair: true }).acquire({ _id: 1 }, { wait: 30_000, signal: controller.signal });
    const outcome = waiting.then(
      () => 'acquired',
      (error: unknown) => error,
    );
    await looking;
    const abortedAt = performance.now();
    controller.abort(new Error('gave up'));
    const rejected = await outcome;
    const ms = performance.now() - abortedAt;
    expect((rejected as Error).message, 'rejects with the abort reason').to.equal('gave up');
    expect(ms, 'ms from the abort to the rejection').to.be.below(1_000);
    // Its ticket is taken out at once (the look just renewed it for 2 s more: it would not expire in this second).
    for (let tries = 0; tries < 50 && liveTickets(await queueOf(collection, 1)) > 1; tries++) await sleep(20);
    expect(liveTickets(await queueOf(collection, 1)), 'only the waiter ahead is still queued, within a second of the abort').to.equal(1);
    await sleep(3_500); // the held-back reply has come, and changes nothing
    expect(liveTickets(await queueOf(collection, 1)), 'only the waiter ahead is still queued, after the late reply').to.equal(1);
    await holder.release();
    const next = await ahead;
    expect(next.fence, 'the waiter ahead gets the lock next: the aborted waiter holds nothing').to.equal(holder.fence + 1);
    await next.release();
  });
});

describe('review d95f1ec: the first in line keeps its ticket renewed', () => {
  it('a fair waiter first in line renews its ticket about every 600 ms (2 s lease; docs/guarantees.md, Fair mode)', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 1 });
    const renewals: number[] = [];
    const recorded = delayedCollection(collection, {
      request: (method, _n, args) => {
        if (isTicketRenewal(method, args)) renewals.push(performance.now());
        return undefined;
      },
    });
    const waiter = writeLock({ collection: recorded, locktimeout: 30_000, fair: true }).acquire({ _id: 1 }, { wait: 20_000 });
    await ticketsReach(collection, 1, 1);
    await sleep(6_000); // first in line: it attempts (which do not renew its ticket); only the background renewal does
    await holder.release();
    await (await waiter).release();
    const gaps = renewals.slice(1).map((at, i) => Math.round(at - renewals[i]!));
    const mean = gaps.reduce((sum, gap) => sum + gap, 0) / Math.max(1, gaps.length);
    console.log(`      ${renewals.length} renewals in 6 s, gaps ${JSON.stringify(gaps)} (mean ${Math.round(mean)} ms)`);
    // Every missed tick is lost margin: the 2 s lease then survives a pause (GC, a busy event loop,
    // a slow reply) of about 2000 - 1200 = 800 ms instead of 2000 - 600 = 1400 ms.
    expect(mean, 'mean ms between renewals of the first in line').to.be.below(900);
  });
});
