import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { TICKET_LEASE } from '../../lib/waiting/waiting-place';
import { realNow } from '../support/clock';
import { isAcquisition, liveTickets, queueOf, settleTime } from '../support/lock-commands';
import { freshCollection, mongoBackend, rejectionOf, sleep } from '../support/fixture';

/** One JSON line a waiter process prints per acquisition. */
interface WaiterAcquisition {
  readonly index: number;
  readonly fence: number;
  readonly calledAt: number;
}

/** Waiter processes still running: a test that fails before they are done must not leave them waiting. */
const children = new Set<ChildProcess>();

/** Kills the waiter processes still running (a test that failed before they were done). */
async function stopChildren(): Promise<void> {
  const running = [...children];
  for (const child of running) child.kill('SIGKILL');
  await Promise.all(running.map((child) => (child.exitCode !== null || child.signalCode !== null ? undefined : new Promise((resolve) => child.once('exit', resolve)))));
}

/**
 * Starts a process of fair waiters (spec/support/fair-waiter.ts) and resolves once it is connected:
 * `go(at)` starts its schedule, `done` resolves what it acquired when it exits.
 */
async function waiterProcess(collection: Collection<Document>, indexes: number[], offsets: number[], holdMs: number): Promise<{ child: ChildProcess; go: (at: number) => void; done: Promise<WaiterAcquisition[]> }> {
  const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName, indexes, offsets, holdMs };
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'support', 'fair-waiter.ts'), JSON.stringify(settings)], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let output = '';
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    if (output.includes('"ready"')) markReady();
  });
  const done = new Promise<WaiterAcquisition[]>((resolve, reject) =>
    child.once('exit', (code) => {
      const lines = output.split('\n').filter((line) => line.trim() !== '' && !line.includes('"ready"'));
      if (code === 0) resolve(lines.map((line) => JSON.parse(line) as WaiterAcquisition));
      else reject(new Error(`waiter process exited ${code}`));
    }),
  );
  await Promise.race([ready, done.then(() => undefined)]);
  return { child, go: (at) => child.stdin!.end(`${JSON.stringify({ go: at })}\n`), done };
}

describe('fair mode (fair: true): first come, first served', () => {
  afterEach(stopChildren);

  it('waiters acquire in the order they came, and a newcomer queues behind them', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 1 });
    const order: number[] = [];
    // Arrivals 100 ms apart: a waiter takes its ticket at its first refusal, which a loaded machine
    // delayed past a 30 ms gap (the next waiter's ticket came first: order [1, 0, …]).
    const waiters = Array.from({ length: 8 }, async (_, i) => {
      await sleep(100 * i);
      const handle = await lock.acquire({ _id: 1 }, { wait: 10_000 });
      order.push(i);
      await sleep(20);
      await handle.release();
    });
    for (let i = 0; i < 400 && liveTickets(await queueOf(collection, 1)) < 8; i++) await sleep(25);
    expect(liveTickets(await queueOf(collection, 1)), 'every waiter holds a ticket').to.equal(8);
    await holder.release();
    // A newcomer that does not wait is refused while the waiters go first, even though the lock is free for a moment.
    const newcomer = await rejectionOf(writeLock({ collection, fair: true }).acquire({ _id: 1 }));
    expect(newcomer.subtype).to.equal('LockAlreadyTaken');
    await Promise.all(waiters);
    expect(order).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(await queueOf(collection, 1), 'every ticket was taken out').to.deep.equal([]);
  });

  it("callers that come together on a free document: the first one's attempt goes out before the later ones' tickets, which keep their order", async function () {
    this.timeout(20_000);
    // Before: the first caller's attempt went out after several awaits that each let the later
    // callers run, so their tickets came first, its attempt was refused, and it was served last
    // (16 callers, 10 rounds: last in 10 of 10).
    const collection = await freshCollection([{ _id: 'together' }]);
    const sent: Array<{ at: number; kind: 'acquisition' | 'ticket' | 'other'; done?: number }> = [];
    const lock = writeLock({ collection: recordingLockWrites(collection, sent), locktimeout: 10_000, fair: true });
    await (await lock.acquire({ _id: 'together' })).release(); // the server's clock is known, as in a running service
    sent.length = 0;
    const served: number[] = [];
    const came = performance.now();
    let firstRelease = Infinity;
    await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const handle = await lock.acquire({ _id: 'together' }, { wait: 10_000 });
        served.push(i);
        // The first holder releases once the later callers' tickets are in the queue (at most 2 s):
        // a release while one is still on its way would serve whichever ticket the server applied first.
        const since = performance.now();
        if (served.length === 1) while (sent.filter((write) => write.kind === 'ticket' && write.done !== undefined).length < 7 && performance.now() - since < 2_000) await sleep(2);
        firstRelease = Math.min(firstRelease, performance.now());
        await handle.release();
      }),
    );
    expect(sent[0]?.kind, 'the first write sent').to.equal('acquisition');
    expect(sent.filter((write) => write.kind === 'ticket').length, 'the later callers queued with tickets').to.be.at.least(1);
    expect([...served].sort(), 'every caller was served').to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7]);
    // Their tickets, stamped in the same millisecond, keep the order they came in (random ids did
    // not); the first caller is served first unless the server took a ticket before its attempt.
    // A ticket keeps its caller's arrival when its first write is stamped within 1 s of it (half the
    // wide stamp window); one sent again (its stamp refused as late) or later than that (a loaded
    // machine) is placed at its write's stamp, as documented: the order is asserted when each
    // ticket was written once and came back within that second, and before the first holder's
    // release (a release while a ticket is still on its way serves the first ticket in the queue
    // then: a later caller's, when the server applied its ticket write first; a clean-clone run
    // served 0, 2, 1 with the tickets back 5 ms after the callers came).
    const tickets = sent.filter((write) => write.kind === 'ticket');
    const slowest = Math.max(...tickets.map((write) => (write.done ?? Infinity) - came));
    const queued = tickets.every((write) => (write.done ?? Infinity) < firstRelease);
    const what = `${tickets.length} ticket write(s), the slowest back ${slowest.toFixed(0)} ms after the callers came, ${queued ? 'all' : 'not all'} before the first release; served ${served.join(', ')}`;
    if (tickets.length === 7 && slowest < 1_000 && queued) expect(served.filter((caller) => caller !== 0), `the later callers, in the order they came (${what})`).to.deep.equal([1, 2, 3, 4, 5, 6, 7]);
    else console.log(`      order not asserted: ${what}`);
    expect(await queueOf(collection, 'together'), 'every ticket was taken out').to.deep.equal([]);
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
    const { child, go } = await waiterProcess(collection, [0], [0], 10);
    go(Date.now());
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
    const gap = 150; // far apart enough that a busy machine cannot reorder when they come
    const processes = await Promise.all(
      [0, 1, 2, 3].map((p) => {
        const indexes = Array.from({ length: 8 }, (_, i) => i * 4 + p);
        return waiterProcess(collection, indexes, indexes.map((index) => index * gap), 5);
      }),
    );
    const start = Date.now() + 200; // every process is connected: the schedule starts together
    for (const waiter of processes) waiter.go(start);
    for (let i = 0; i < 400 && liveTickets(await queueOf(collection, 'fifo')) < 32; i++) await sleep(50);
    expect(liveTickets(await queueOf(collection, 'fifo')), 'all 32 queued').to.equal(32);
    await holder.release();
    const acquisitions = (await Promise.all(processes.map((waiter) => waiter.done))).flat();
    // The order they came: when each called acquire (one machine's clock); the order served: their fencing tokens.
    const came = [...acquisitions].sort((a, b) => a.calledAt - b.calledAt).map((a) => a.index);
    const served = [...acquisitions].sort((a, b) => a.fence - b.fence).map((a) => a.index);
    expect(served).to.deep.equal(came);
    expect(came, 'every waiter acquired').to.have.length(32);
  });
});

/** `collection`, recording when each of its findOneAndUpdate calls is sent and whether it is an acquisition or a ticket taken. */
function recordingLockWrites(collection: Collection<Document>, sent: Array<{ at: number; kind: 'acquisition' | 'ticket' | 'other'; done?: number }>): Collection<Document> {
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property !== 'findOneAndUpdate') return (value as (...a: unknown[]) => unknown).bind(target);
      return (...args: unknown[]) => {
        const update = args[1] as Document;
        const ticket = update.$push !== undefined && 'lock.queue' in (update.$push as Document);
        const write: { at: number; kind: 'acquisition' | 'ticket' | 'other'; done?: number } = { at: performance.now(), kind: isAcquisition('findOneAndUpdate', args) ? 'acquisition' : ticket ? 'ticket' : 'other' };
        sent.push(write);
        const reply = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        reply.then(
          () => (write.done = performance.now()),
          () => (write.done = performance.now()),
        );
        return reply;
      };
    },
  });
}

describe('fair waiters of several processes pace themselves by their place in the queue', () => {
  it('a waiter with tickets ahead of it only looks (renews its ticket, reading the queue) instead of attempting; the line moves in order', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'line' }]);
    const holder = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'line' });
    // Each waiter its own lock instance: no local waiters shared, as in processes of their own.
    const sent = Array.from({ length: 5 }, () => [] as Array<{ at: number; kind: 'acquisition' | 'ticket' | 'other' }>);
    const waiters: Array<Promise<number>> = [];
    for (const [i, log] of sent.entries()) {
      const lock = writeLock({ collection: recordingLockWrites(collection, log), locktimeout: 30_000, fair: true });
      waiters.push(
        lock.acquire({ _id: 'line' }, { wait: 30_000 }).then(async (handle) => {
          await sleep(10);
          await handle.release();
          return handle.fence;
        }),
      );
      // The next waiter's ticket comes after this one's.
      for (let tries = 0; tries < 200 && liveTickets(await queueOf(collection, 'line')) <= i; tries++) await sleep(10);
    }
    expect(liveTickets(await queueOf(collection, 'line')), 'every waiter queued').to.equal(5);
    await sleep(700); // the holder keeps holding: a poll every 150 ms at most would show
    const releasedAt = performance.now();
    await holder.release();
    const fences = await Promise.all(waiters);
    expect([...fences].sort((a, b) => a - b), 'served in the order they came').to.deep.equal(fences);
    for (const [i, log] of sent.entries()) {
      const ticketAt = log.find((command) => command.kind === 'ticket')!.at;
      const attemptsWhileHeld = log.filter((command) => command.kind === 'acquisition' && command.at > ticketAt && command.at < releasedAt).length;
      const looks = log.filter((command) => command.kind === 'other' && command.at < releasedAt).length;
      if (i === 0) continue; // the first in line polls (it cannot know when a holder elsewhere releases)
      expect(attemptsWhileHeld, `waiter ${i}: acquisition attempts after its ticket, while tickets ahead of it were live`).to.equal(0);
      expect(looks, `waiter ${i}: looks while it waited`).to.be.greaterThan(0);
    }
  });
});

/*
 * A fair waiter's ticket writes never hold up its abort or overrun its `wait`. The defects guarded
 * against:
 * - an aborted (or timed-out) fair waiter rejected only once its ticket's removal had come back
 *   (document-lock.ts `acquire` awaited `place.leave()`, whose `dropTicket` is an updateOne bounded
 *   only by `timeout`), not "at once with signal.reason" (README, Waiting);
 * - a fair waiter queued behind a waiter of its own process took its ticket (`place.start()`,
 *   takeTicket: up to 3 stamped attempts) with neither the signal nor the `wait` deadline watching:
 *   the abort was noticed, and the wait started counting, only after the ticket's reply.
 *
 * The slow ticket writes are modelled by a collection wrapper that holds back the replies to the
 * writes of `lock.queue` (a slow primary, a congested link): the lock's own writes are not delayed.
 */

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

describe('a fair waiter\'s ticket writes and its abort or wait', () => {
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

/*
 * In fair mode a waiter that holds a ticket still tries with the caller's whole filter. The defect
 * guarded against: once a waiter held a ticket, WaitingPlace.filter() (lib/waiting/waiting-place.ts)
 * replaced the caller's filter by the ticket's document `{ _id }` for every further attempt, so the
 * rest of the filter was never checked again: a waiter for `{ _id, status: 'open' }` acquired the
 * document after the holder closed it, and a waiter for "any open job" was pinned to the first job
 * that refused it and acquired it once done. Without `fair`, the same waits end in
 * `RessourceNotFound` (or lock an open job), as the filter says.
 */

async function ticketCount(collection: Collection<Document>, id: unknown): Promise<number> {
  const queue = ((await collection.findOne({ _id: id as never }))?.lock?.queue ?? []) as unknown[];
  return queue.length;
}

describe('a fair waiter keeps the caller\'s filter', () => {
  it('without fair (control): a waiter for { _id, status: "open" } does not get the job once it was closed', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000 });
    const holder = await jobs.acquire({ _id: 'job-1', status: 'open' });
    const waiter = jobs.acquire({ _id: 'job-1', status: 'open' }, { wait: 3_000 });
    await sleep(300);
    await holder.release({ update: { $set: { status: 'done' } } });
    const error = await rejectionOf(waiter);
    expect(error.subtype).to.equal('RessourceNotFound');
  });

  it('fair: a waiter for { _id, status: "open" } does not get the job once the holder closed it', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await jobs.acquire({ _id: 'job-1', status: 'open' });
    const waiter = jobs.acquire({ _id: 'job-1', status: 'open' }, { wait: 3_000 });
    for (let waited = 0; (await ticketCount(collection, 'job-1')) === 0; waited += 20) {
      expect(waited, 'the waiter took a ticket').to.be.below(3_000);
      await sleep(20);
    }
    await holder.release({ update: { $set: { status: 'done' } } }); // the job is done
    const outcome = await waiter.then(
      async (handle) => {
        const doc = await collection.findOne({ _id: 'job-1' as never });
        await handle.release();
        return `acquired a lock on a document with status ${JSON.stringify(doc?.status)}`;
      },
      (error: Error & { subtype?: string }) => `rejected: ${error.subtype ?? error.message}`,
    );
    expect(outcome, 'the filter { status: "open" } no longer matches job-1').to.equal('rejected: RessourceNotFound');
  });

  it('fair: a waiter for "any open job" does not lock a job that is no longer open', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await jobs.acquire({ status: 'open' }); // job-1, the only open job
    const waiter = jobs.acquire({ status: 'open' }, { wait: 3_000 });
    await sleep(300);
    // A filter that does not name the document's _id takes no ticket: it waits as without fair mode.
    expect(await ticketCount(collection, 'job-1'), 'no ticket pins the waiter to job-1').to.equal(0);
    await collection.insertOne({ _id: 'job-2' as never, status: 'open' }); // a new job comes in
    await holder.release({ update: { $set: { status: 'done' } } }); // job-1 is done
    const handle = await waiter;
    const doc = await collection.findOne({ 'lock.tags.write.id': handle.id });
    await handle.release();
    expect(doc?._id, `the waiter for { status: 'open' } locked ${String(doc?._id)} (status ${String(doc?.status)})`).to.equal('job-2');
  });
});
