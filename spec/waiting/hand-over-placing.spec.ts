/**
 * Review of 876d109: a release here hands the lock to a waiter whose fair ticket take is on its
 * way (judged at that ticket's place), and the waiter stops waiting for its take. When that
 * hand-over gives it nothing (a waiter of another process truly came first), the waiter must
 * still keep the place its take was sent for: it must not be overtaken by a waiter of another
 * process that came after it.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, sleep } from '../support/fixture';
import { gate, isTicketTake, queueOf } from '../support/lock-commands';

async function untilQueued(collection: Collection<Document>, id: unknown, count: number): Promise<void> {
  for (const started = Date.now(); Date.now() - started < 5_000; await sleep(5)) {
    if ((await queueOf(collection, id)).length >= count) return;
  }
  throw new Error(`fewer than ${count} ticket(s) queued after 5 s`);
}

describe('fair mode: a hand-over to a waiter whose ticket take is on its way, that gives it nothing (review of 876d109)', () => {
  it('the waiter keeps the place its take was sent for: a waiter of another process that came after it does not overtake it', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'placing' }, { _id: 'warm' }]);
    // Process "here": the holder H, and later A, whose first ticket take is held back until H has released.
    const takeHeld = gate();
    let takes = 0;
    const slowFirstTake = delayedCollection(collection, { request: (method, _n, args) => (isTicketTake(method, args) && ++takes === 1 ? takeHeld.promise : undefined) });
    const here = writeLock({ collection: slowFirstTake, locktimeout: 10_000, fair: true });
    const elsewhere = writeLock({ collection, locktimeout: 10_000, fair: true }); // B's process
    const third = writeLock({ collection, locktimeout: 10_000, fair: true }); // C's process
    for (const lock of [here, elsewhere, third]) await (await lock.acquire({ _id: 'warm' })).release(); // clocks known, as in running services
    const holder = await here.acquire({ _id: 'placing' });

    const served: string[] = [];
    const waiter = (lock: typeof here, name: string): Promise<void> =>
      lock.acquire({ _id: 'placing' }, { wait: 20_000 }).then(async (handle) => {
        served.push(name);
        await sleep(300); // held a while: the others are queued by the time it lets go
        await handle.release();
      });
    const b = waiter(elsewhere, 'B'); // B truly comes first, with its ticket
    await untilQueued(collection, 'placing', 1);
    const a = waiter(here, 'A'); // A comes second: refused, its ticket take (at its arrival) held back on its way
    for (let i = 0; i < 400 && takes < 1; i++) await sleep(5);
    expect(takes, "A's ticket take was sent").to.equal(1);
    await sleep(100);
    const c = waiter(third, 'C'); // C comes third, after A
    await untilQueued(collection, 'placing', 2); // C's ticket is in the queue (A's is still on its way)
    await sleep(1_100); // past half the placement window since A came: a new take of A's would be placed at its own stamp
    // H lets go here while A's take is on its way: handed to A at that take's place, which matches
    // nothing (B's ticket came first); the lock is released for B.
    await holder.release();
    takeHeld.open(); // A's take lands, at A's arrival (within the 2 s window)
    await Promise.all([a, b, c]);
    expect(served, 'the order they came in (B, then A, then C)').to.deep.equal(['B', 'A', 'C']);
    for (let i = 0; i < 200 && (await queueOf(collection, 'placing')).length > 0; i++) await sleep(25);
    expect(await queueOf(collection, 'placing'), 'every ticket was taken out').to.deep.equal([]);
  });
});
