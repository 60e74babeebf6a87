import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../lib';
import { TICKET_LEASE } from '../lib/waiting/waiting-place';
import { freshCollection, mongoBackend, rejectionOf, sleep } from './support/fixture';

async function queueOf(collection: Collection<Document>, id: unknown): Promise<Array<{ id: string; exp: Date }>> {
  return ((await collection.findOne({ _id: id as never }))?.lock?.queue ?? []) as Array<{ id: string; exp: Date }>;
}

function liveTickets(queue: Array<{ exp: Date }>): number {
  return queue.filter((ticket) => ticket.exp.getTime() > Date.now()).length;
}

describe('fair mode (fair: true): first come, first served', () => {
  it('waiters acquire in the order they came, and a newcomer queues behind them', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 1 });
    const order: number[] = [];
    const waiters = Array.from({ length: 8 }, async (_, i) => {
      await sleep(30 * i);
      const handle = await lock.acquire({ _id: 1 }, { wait: 10_000 });
      order.push(i);
      await sleep(20);
      await handle.release();
    });
    await sleep(30 * 8 + 100);
    expect(liveTickets(await queueOf(collection, 1)), 'every waiter holds a ticket').to.equal(8);
    await holder.release();
    // A newcomer that does not wait is refused while the waiters go first, even though the lock is free for a moment.
    const newcomer = await rejectionOf(writeLock({ collection, fair: true }).acquire({ _id: 1 }));
    expect(newcomer.subtype).to.equal('LockAlreadyTaken');
    await Promise.all(waiters);
    expect(order).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(await queueOf(collection, 1), 'every ticket was taken out').to.deep.equal([]);
  });

  it('abort and wait expiry take the ticket out of the queue', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 1 });
    const aborted = lock.acquire({ _id: 1 }, { wait: 10_000, signal: AbortSignal.timeout(300) });
    const expired = lock.acquire({ _id: 1 }, { wait: 400 });
    await sleep(150);
    expect(liveTickets(await queueOf(collection, 1))).to.equal(2);
    expect((await rejectionOf(aborted)).name).to.equal('TimeoutError');
    expect((await rejectionOf(expired)).subtype).to.equal('LockAlreadyTaken');
    await sleep(50);
    expect(await queueOf(collection, 1)).to.deep.equal([]);
    await holder.release();
    await (await lock.acquire({ _id: 1 })).release(); // nobody queues any more
  });

  it('a SIGKILLed waiter leaves the queue within its ticket lease; the next waiter gets the lock', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'fifo' }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 'fifo' });
    const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, indexes: [0], startAt: [Date.now()], holdMs: 10 };
    const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'support', 'fair-waiter.ts'), JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'inherit'] });
    for (let waited = 0; liveTickets(await queueOf(collection, 'fifo')) === 0; waited += 50) {
      expect(waited, 'the child took a ticket').to.be.below(15_000);
      await sleep(50);
    }
    const behind = lock.acquire({ _id: 'fifo' }, { wait: 20_000 }); // queues behind the child
    await sleep(200);
    child.kill('SIGKILL');
    const killedAt = Date.now();
    await holder.release();
    const next = await behind;
    const tookOver = Date.now() - killedAt;
    console.log(`      the next waiter got the lock ${tookOver} ms after the waiter ahead of it was killed (ticket lease ${TICKET_LEASE} ms)`);
    expect(tookOver).to.be.below(TICKET_LEASE + 1_000);
    await next.release();
  });

  it('32 waiters across 4 processes acquire in the order they came', async function () {
    this.timeout(120_000);
    const collection = await freshCollection([{ _id: 'fifo' }]);
    const lock = writeLock({ collection, locktimeout: 60_000, fair: true });
    const holder = await lock.acquire({ _id: 'fifo' });
    const start = Date.now() + 2_500; // time for the processes to start
    const gap = 150; // far apart enough that a busy machine cannot reorder when they come
    const processes = [0, 1, 2, 3].map((p) => {
      const indexes = Array.from({ length: 8 }, (_, i) => i * 4 + p);
      const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, indexes, startAt: indexes.map((index) => start + index * gap), holdMs: 5 };
      const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'support', 'fair-waiter.ts'), JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'inherit'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      return new Promise<Array<{ index: number; fence: number }>>((resolve, reject) =>
        child.once('exit', (code) => (code === 0 ? resolve(output.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { index: number; fence: number })) : reject(new Error(`waiter process exited ${code}`)))),
      );
    });
    await sleep(start + 32 * gap + 500 - Date.now());
    expect(liveTickets(await queueOf(collection, 'fifo')), 'all 32 queued').to.equal(32);
    await holder.release();
    const acquisitions = (await Promise.all(processes)).flat().sort((a, b) => a.fence - b.fence);
    expect(acquisitions.map((a) => a.index)).to.deep.equal(Array.from({ length: 32 }, (_, i) => i));
  });
});
