import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { freshCollection, sleep } from '../support/fixture';
import { queueOf } from '../support/lock-commands';

/*
 * A third independent review of d211554 (a fair ticket carries when its call came: the server
 * clock's lower bound read in the call, while within half the window). That reading is taken
 * before the call sends anything: on a lock that has had no reply yet it is the local clock, a
 * guess. A ticket's place must never come before a waiter that truly came first and already
 * holds a ticket in the queue. Both tests failed on d211554: the ticket now keeps its arrival
 * only when the lock's clock was known then, and only on its first write, at most a quarter of the server's stamp window back.
 */

async function untilQueued(collection: Collection<Document>, id: unknown, count: number): Promise<{ id: string; at: Date; exp: Date }[]> {
  for (const started = Date.now(); Date.now() - started < 5_000; await sleep(1)) {
    const queue = await queueOf(collection, id);
    if (queue.length >= count) return queue;
  }
  throw new Error(`fewer than ${count} ticket(s) queued after 5 s`);
}

/**
 * One round: B (a fair lock whose clock is known, as in a running service) waits on a held
 * document with its ticket; `gapMs` later, A calls, on a fair lock of another service, not used
 * yet, whose machine's clock is `behindMs` behind the server's (through `slow`, if given). Resolves
 * the order they were served in, and where their tickets were placed.
 */
async function round(behindMs: number, gapMs: number, slow?: (collection: Collection<Document>) => Collection<Document>): Promise<{ order: string; tickets: string }> {
  const collection = await freshCollection([{ _id: 'doc' }, { _id: 'warm' }]);
  const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 'doc' });
  const early = writeLock({ collection, locktimeout: 10_000, fair: true });
  await (await early.acquire({ _id: 'warm' })).release();
  const late = writeLock({ collection: slow?.(collection) ?? collection, locktimeout: 10_000, fair: true, clock: () => realNow() - behindMs });
  const served: string[] = [];
  const waiter = (lock: typeof early, name: string): Promise<void> =>
    lock.acquire({ _id: 'doc' }, { wait: 20_000 }).then(async (handle) => {
      served.push(name);
      await handle.release();
    });
  const b = waiter(early, 'B');
  const [ticketB] = await untilQueued(collection, 'doc', 1); // B waits, with its ticket
  await sleep(gapMs);
  const calledA = realNow();
  const a = waiter(late, 'A'); // A comes after B's ticket was taken
  const ticketA = (await untilQueued(collection, 'doc', 2)).find((ticket) => ticket.id !== ticketB!.id)!;
  const tickets = `B at ${Math.round(ticketB!.at.getTime() - calledA)} ms, A at ${Math.round(ticketA.at.getTime() - calledA)} ms (from A's call)`;
  await holder.release();
  await Promise.all([a, b]);
  expect(await queueOf(collection, 'doc'), 'every ticket was taken out').to.deep.equal([]);
  return { order: served.join(','), tickets };
}

describe('fair mode: a ticket is never placed before a waiter that came first (review 3)', () => {
  it('a lock whose local clock is 40 ms behind, on its first call, does not overtake a waiter queued 10 ms before it came', async function () {
    this.timeout(60_000);
    const rounds: Array<{ order: string; tickets: string }> = [];
    for (let i = 0; i < 5; i++) rounds.push(await round(40, 10));
    expect(rounds.filter((r) => r.order === 'B,A').length, JSON.stringify(rounds)).to.equal(5);
  });

  it('a ticket take refused once (slow network) then backdates to a guessed arrival 500 ms early: no overtaking of a waiter queued 200 ms before', async function () {
    this.timeout(60_000);
    const rounds: Array<{ order: string; tickets: string }> = [];
    for (let i = 0; i < 3; i++) {
      // Its first ticket take reaches the server 300 ms late.
      let takes = 0;
      const slow = (collection: Collection<Document>) =>
        delayedCollection(collection, { request: (method, _n, args) => (method === 'findOneAndUpdate' && (args[1] as Document)?.$push?.['lock.queue'] && ++takes === 1 ? 300 : undefined) });
      rounds.push(await round(500, 200, slow));
    }
    expect(rounds.filter((r) => r.order === 'B,A').length, JSON.stringify(rounds)).to.equal(3);
  });
});
