/**
 * Runs one cell of the lifecycle table (lifecycle-table.ts) on a real server and observes what
 * its client saw: the status, whether the lock was still held when the status line arrived (the
 * lock's writes after its acquisition are slowed by {@link SLOW_WRITE_MS}, so a release that does
 * not come first shows), whether it was handed over live, whether the commit was applied.
 */
import { request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import type { Collection, Document } from 'mongodb';
import { commit, commitAll, writeLock } from '../../../lib';
import { lockOf, monglockPlugin } from '../../../lib/hapi';
import { safetyMargin } from '../../../lib/locks/lease-keeper';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import type { Applied, Column, Release, Row } from './lifecycle-table';
import { planOf, type Plan, type Probe } from './lifecycle-plans';

/** How much later than asked each lock write after the acquisition (a release, a commit) is sent, at most. */
const SLOW_WRITE_MS = 100;
const LEASE_MS = 10_000;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What a cell's client saw. */
export interface Observed {
  readonly release: Release | 'kept without the client' | 'handed, not live';
  readonly status: number;
  readonly commit: Applied;
}

const servers: Hapi.Server[] = [];

/** Stops the servers the cells made (an afterEach). */
export async function stopCellServers(): Promise<void> {
  await Promise.all(servers.splice(0).map((server) => server.stop({ timeout: 1_000 })));
}

interface Deferred {
  readonly promise: Promise<void>;
  readonly resolve: () => void;
}
function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** An acquisition: `findOneAndUpdate` with +1 on the fence. */
const isAcquisition = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && (args[1] as Document | undefined)?.$inc?.['lock.fence'] === 1;

/** The unexpired write entries of the documents `ids`, not those of `others`, with their expiry. */
async function entries(collection: Collection<Document>, ids: readonly string[], others: readonly string[]): Promise<Array<{ id: string; exp: Date }>> {
  const docs = await collection.find({ _id: { $in: ids as never[] } }).toArray();
  const all = docs.flatMap((doc) => (doc.lock?.tags?.write ?? []) as Array<{ id: string; exp: Date }>);
  return all.filter((entry) => entry.exp.getTime() > Date.now() && !others.includes(entry.id));
}

/** Runs `row` × `column` and resolves what its client saw. */
export async function runCell(row: Row, column: Column): Promise<Observed> {
  const plan = planOf(row.id);
  const ids = column === 'commitAll' ? ['a', 'b'] : ['a'];
  const seeded = await freshCollection([
    { _id: 'a', n: 0 },
    { _id: 'b', n: 0 },
  ]);
  const events = { answered: deferred(), stopBegan: deferred(), started: deferred(), attempted: deferred(), committing: deferred() };
  const collection = delayedCollection(seeded, {
    request: (method, _n, args) => {
      if (isAcquisition(method, args)) return undefined;
      // Held until the case has seen what the client saw (a release after the answer then lands after it), or SLOW_WRITE_MS (1 s for a client gone: no status line waits for it).
      if (plan.drive !== 'stop-committing') return Promise.race([events.answered.promise, sleep(plan.drive === 'disconnect' ? 1_000 : SLOW_WRITE_MS)]);
      events.committing.resolve();
      return events.stopBegan.promise.then(() => sleep(SLOW_WRITE_MS));
    },
    reply: (method, _n, args) => {
      events.attempted.resolve();
      return plan.lostReplies && !isAcquisition(method, args) ? new Promise(() => undefined) : undefined;
    },
  });
  const others = plan.wait !== undefined ? await Promise.all(ids.map(async (id) => (await writeLock({ collection: seeded, locktimeout: 30_000 }).acquire({ _id: id })).id)) : [];
  const probe = makeProbe(row, column, events, async () => void (await writeLock({ collection: seeded }).release({ _id: 'a' })));
  let acquired = false;
  const server = await serverFor(plan, probe, column, writeLock({ collection, locktimeout: LEASE_MS, ...(plan.lostReplies && { timeout: 1_000 }) }), () => (acquired = true), events.stopBegan.resolve);
  const held = (): Promise<Array<{ id: string; exp: Date }>> => entries(seeded, ids, others);

  const seen = await drive(server, plan, row.transport, events, held);
  events.answered.resolve();
  let release: Observed['release'];
  if (!acquired) await sleep(200); // hapi answered before the acquisition: none may start after it
  if (!acquired) release = 'none';
  else if (seen.atStatus.length === 0) release = 'before';
  else if (column === 'checkout' && seen.atStatus.some((entry) => seen.body.includes(entry.id))) {
    const live = seen.atStatus.every((entry) => entry.exp.getTime() - Date.now() > safetyMargin(LEASE_MS));
    await sleep(300); // neither the keeper nor maxHold releases it after the hand-over
    release = !live ? 'handed, not live' : (await held()).length === ids.length ? 'handed' : 'after';
  } else if (seen.atEnd === 0) release = 'last-byte';
  else release = (await releasedWithin(held, 3_000)) ? 'after' : 'kept without the client';
  return { release, status: seen.status, commit: await applied(seeded, column, ids) };
}

function makeProbe(row: Row, column: Column, events: Record<'answered' | 'stopBegan' | 'started', Deferred>, forceRelease: () => Promise<void>): Probe {
  const answerWith = (request: Hapi.Request, value: unknown): unknown => {
    if (column === 'commit') return commit({ $inc: { n: 1 } }, value);
    if (column === 'commitAll') return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], value);
    return value;
  };
  return {
    column,
    transport: row.transport,
    answerWith,
    answer: (request) => answerWith(request, column === 'checkout' ? lockOf(request).lock : { done: true }),
    untilAnswered: (ms) => Promise.race([events.answered.promise, sleep(ms)]),
    stopBegan: events.stopBegan.promise,
    started: events.started.resolve,
    forceRelease,
  };
}

/** The server of a cell: the plan's setup around monglock's registration, and its route. */
async function serverFor(plan: Plan, probe: Probe, column: Column, lock: ReturnType<typeof writeLock>, onAcquired: () => void, onStop: () => void): Promise<Hapi.Server> {
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  servers.push(server);
  const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });
  const monglock = {
    lock,
    ...(column === 'commitAll' ? { filters: () => [{ _id: 'a' }, { _id: 'b' }] } : { filter: byId }),
    ...(column === 'checkout' && { mode: 'checkout' as const }),
    ...(plan.wait !== undefined && { wait: plan.wait }),
    ...plan.settings,
  };
  const route = (): void => void server.route({ method: plan.method ?? 'POST', path: '/docs/{id}', options: { ...plan.route(probe), plugins: { monglock } } });
  await plan.before?.(server);
  if (plan.routeFirst) route();
  await server.register({ plugin: monglockPlugin });
  server.ext('onPreHandler', (_request, h) => (onAcquired(), h.continue)); // after monglock's: the lock is held
  server.ext('onPreStop', () => onStop());
  await plan.after?.(server);
  if (!plan.routeFirst) route();
  return server;
}

/** What the client saw: its status, the entries held once it had the status line, those held once it had the whole body. */
interface Seen {
  readonly status: number;
  readonly body: string;
  readonly atStatus: Array<{ id: string; exp: Date }>;
  readonly atEnd: number;
}

async function drive(server: Hapi.Server, plan: Plan, transport: 'http' | 'inject', events: Record<'started' | 'attempted' | 'committing', Deferred>, held: () => ReturnType<typeof entries>): Promise<Seen> {
  const method = plan.request?.method ?? plan.method ?? 'POST';
  const headers = plan.request?.headers ?? {};
  const trigger = { 'stop-waiting': events.attempted, 'stop-running': events.started, 'stop-committing': events.committing }[plan.drive as string] as Deferred | undefined;
  if (transport === 'inject') {
    await server.initialize();
    const injected = server.inject({ method, url: '/docs/a', headers });
    if (trigger) await Promise.all([trigger.promise.then(() => server.stop({ timeout: 5_000 })), injected]);
    const response = await injected;
    const atStatus = await held();
    return { status: response.statusCode, body: response.payload, atStatus, atEnd: atStatus.length };
  }
  await server.start();
  if (plan.drive === 'disconnect') return disconnected(server, method, events.started, held);
  const answer = overHttp(server.info.port as number, method, headers, held);
  if (trigger) await trigger.promise.then(() => server.stop({ timeout: 5_000 }));
  return answer;
}

/** A request over HTTP: what the client saw. */
function overHttp(port: number, method: string, headers: Record<string, string>, held: () => ReturnType<typeof entries>): Promise<Seen> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/docs/a', method, agent: false, headers: { connection: 'close', ...headers } }, (res) => {
      void held().then((atStatus) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => void held().then((atEnd) => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), atStatus, atEnd: atEnd.length }), reject));
        res.on('error', reject);
      }, reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A request whose client leaves once the handler runs: the entries held once hapi finished the request. */
async function disconnected(server: Hapi.Server, method: string, started: Deferred, held: () => ReturnType<typeof entries>): Promise<Seen> {
  const finished = new Promise<void>((resolve) => server.events.once('response', () => resolve()));
  const req = httpRequest({ host: '127.0.0.1', port: server.info.port as number, path: '/docs/a', method, agent: false });
  req.on('error', () => undefined);
  req.end();
  await started.promise;
  req.destroy();
  await finished;
  const atStatus = await held();
  return { status: 0, body: '', atStatus, atEnd: atStatus.length };
}

async function releasedWithin(held: () => ReturnType<typeof entries>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while ((await held()).length > 0) {
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}

/** Whether the column's commit was applied to every document it locks (null: no commit). */
async function applied(collection: Collection<Document>, column: Column, ids: readonly string[]): Promise<Observed['commit']> {
  if (column !== 'commit' && column !== 'commitAll') return null;
  const docs = await collection.find({ _id: { $in: ids as never[] } }).toArray();
  const counts = docs.map((doc) => doc.n as number);
  if (counts.every((n) => n === 1)) return 'applied';
  return counts.every((n) => n === 0) ? 'not applied' : 'partly applied';
}
