import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, writeLock } from '../../lib';
import { realNow } from '../support/clock';
import { freshCollection, sleep } from '../support/fixture';
import { delayedCollection } from '../../stress/delayed-collection';
import { isAcquisition, liveTickets, queueOf, settleTime } from '../support/lock-commands';

/*
 * Guards from the review of c8550f2 ("a new waiting call takes its ticket before its first attempt
 * when this process saw tickets of other processes in the last 150 ms"), which was reverted (27bd3ff)
 * after each of these tests failed on it: a fair call must still attempt a free document when its
 * wait is shorter than a round trip, must give up when its wait runs out, and must take no ticket
 * for a tag that nothing blocks. Each lock instance has its own LocalWaiters, so a second lock
 * instance stands for another process. They pass without that change, and hold any later one to
 * the same outcomes.
 */

async function untilTickets(collection: Collection<Document>, id: unknown, count: number): Promise<void> {
  for (let tries = 0; liveTickets(await queueOf(collection, id)) !== count; tries++) {
    expect(tries, `${count} live ticket(s)`).to.be.below(500);
    await sleep(5);
  }
}

/** `collection` through {@link delayedCollection}: findOneAndUpdate calls delayed as `delays` says at the time, and lock writes recorded. */
function controlled(collection: Collection<Document>) {
  const delays = { all: 0, takeReply: 0 };
  const sent: string[] = [];
  const isTake = (method: string, args: readonly unknown[]): boolean => {
    const push = (args[1] as Document | undefined)?.$push as Document | undefined;
    return method === 'findOneAndUpdate' && push !== undefined && 'lock.queue' in push;
  };
  const proxy = delayedCollection(collection, {
    request: (method, _n, args) => {
      if (method !== 'findOneAndUpdate' && method !== 'updateOne') return undefined;
      sent.push(`${method}${isTake(method, args) ? ' (ticket taken)' : isAcquisition(method, args) ? ' (acquisition)' : ` ${JSON.stringify(args[1]).slice(0, 120)}`}`);
      return method === 'findOneAndUpdate' && delays.all > 0 ? delays.all : undefined;
    },
    reply: (method, _n, args) => (isTake(method, args) && delays.takeReply > 0 ? delays.takeReply : undefined),
  });
  return { proxy, delays, sent };
}

/**
 * Makes lock instance `acquireOn` (A) see, with a fair waiter of its own, the ticket of a fair
 * waiter of lock instance `other` (B, "another process") on document `id` held by `holder`; then
 * aborts A's waiter, so that A has no local waiter left but a fresh sighting.
 */
async function sighting(
  collection: Collection<Document>,
  id: unknown,
  a: { acquire(filter: Document, params: Document): Promise<unknown> },
  b: { acquire(filter: Document, params: Document): Promise<unknown> },
  params: Document = {},
): Promise<{ stopB: AbortController; b: Promise<unknown> }> {
  const stopB = new AbortController();
  const bWaiter = b.acquire({ _id: id }, { ...params, wait: 10_000, signal: stopB.signal }).catch((error: unknown) => error);
  await untilTickets(collection, id, 1);
  const stopA = new AbortController();
  const aWaiter = a.acquire({ _id: id }, { ...params, wait: 10_000, signal: stopA.signal }).catch((error: unknown) => error);
  await untilTickets(collection, id, 2); // A's ticket write returned the queue with B's ticket in it
  await sleep(5);
  stopA.abort();
  await aWaiter;
  return { stopB, b: bWaiter };
}

/** Document 1 held by a plain writeLock; fair instance A (recorded, delays switchable) saw a ticket of fair instance B. */
async function writeLockSighting() {
  const collection = await freshCollection([{ _id: 1 }]);
  const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
  const a = controlled(collection);
  const lockA = writeLock({ collection: a.proxy, locktimeout: 10_000, fair: true });
  const lockB = writeLock({ collection, locktimeout: 10_000, fair: true });
  return { collection, holder, a, lockA, ...(await sighting(collection, 1, lockA, lockB)) };
}

describe('review c8550f2 (reverted): a fair call right after another instance\'s ticket was seen', () => {
  it('a fair call on a FREE document, right after a sighting, with a wait shorter than a round trip: resolves (as before the change)', async function () {
    this.timeout(20_000);
    const { collection, holder, a, lockA, stopB, b } = await writeLockSighting();
    const sawAt = performance.now();
    stopB.abort();
    await b;
    await holder.release();
    await untilTickets(collection, 1, 0);
    // Nobody holds document 1, nobody waits for it.
    expect((await collection.findOne({ _id: 1 as never }))?.lock?.tags?.write ?? [], 'no holder').to.have.length(0);
    console.log(`      ${Math.round(performance.now() - sawAt)} ms after the sighting; every lock command of A now takes 50 ms`);
    a.delays.all = 50;
    a.sent.length = 0;
    const start = realNow();
    const outcome = await settleTime(lockA.acquire({ _id: 1 }, { wait: 20 }), start);
    await sleep(200);
    console.log(`      ${outcome}; commands: ${a.sent.join(', ')}; live tickets 200 ms later: ${liveTickets(await queueOf(collection, 1))}`);
    expect(outcome, 'a free document, a wait of 20 ms (wait bounds the retrying, not an attempt already sent)').to.match(/^resolved/);
  });

  it('a fair call whose ticket (taken first) comes back just before its wait: gives up when its wait runs out', async function () {
    this.timeout(20_000);
    const { holder, a, lockA, stopB, b } = await writeLockSighting();
    a.delays.takeReply = 450; // a slow reply to the ticket's write (as in fair.spec.ts slowTickets)
    const start = realNow();
    const outcome = await settleTime(lockA.acquire({ _id: 1 }, { wait: 500 }), start);
    console.log(`      ${outcome}`);
    stopB.abort();
    await b;
    await holder.release();
    expect(Number(/after (\d+) ms/.exec(outcome)?.[1]), 'ms until a wait of 500 ms gave up').to.be.below(800);
  });

  it('a fair call of a tag that the sighted tickets do not block takes no ticket (as before)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const options = { locktimeout: 10_000, lockRelationships: { x: { cooperative: ['x'] }, y: { cooperative: ['y'] } } };
    const holder = await multiLock({ collection, ...options }).acquire({ _id: 1 }, { tag: 'x' });
    const a = controlled(collection);
    const lockA = multiLock({ collection: a.proxy, ...options, fair: true });
    const lockB = multiLock({ collection, ...options, fair: true });
    const { stopB, b } = await sighting(collection, 1, lockA, lockB, { tag: 'x' });
    a.sent.length = 0;
    // Tag y is concurrent with x: nothing blocks it (no y lock, no y ticket); its first attempt wins.
    const handle = await lockA.acquire({ _id: 1 }, { tag: 'y', wait: 5_000 });
    const sent = [...a.sent];
    await handle.release();
    stopB.abort();
    await b;
    await holder.release();
    console.log(`      commands of the y call: ${sent.join(', ')}`);
    expect(sent.filter((command) => command.includes('ticket taken')), 'tickets taken by an acquisition nothing blocks').to.deep.equal([]);
  });
});
