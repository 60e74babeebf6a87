/**
 * One worker process of `npm run demo` (started by demo/demo.ts, never by hand): a hapi server
 * whose routes lock an account document with monglock, in the recommended pattern. The lock's
 * acquisition returns the account (`document`), the handler returns `commit(update, value)`,
 * and the release applies that update: two commands per critical section.
 *
 * Talks to the demo over the IPC channel: sends `{ type: 'ready', port }` once it listens,
 * answers `'report'` with what it observed, and stops on SIGTERM or when the channel closes
 * (the demo is gone: a worker never outlives it).
 */
import { subscribe } from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { inspect } from 'node:util';
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { MongoClient } from 'mongodb';
import { CHANNELS, commit, writeLock, type WaitEvent } from 'monglock';
import { lockOf, monglockPlugin } from 'monglock/hapi';
import { DEMO_DB, ROUTES, envInteger, type MoveAnswer, type WorkerMessage, type WorkerReport } from './protocol';

/** ms of work inside each critical section, between reading the account and writing it back. */
const WORK_MS = envInteger('DEMO_WORK_MS', 1, 0);

/** Microseconds on the machine's monotonic clock: the same clock in every process of one machine. */
const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  const send = process.send?.bind(process);
  const uri = process.env.MONGODB_URI;
  if (!send || !uri) throw new Error('demo/worker.ts is started by demo/demo.ts (npm run demo), with an IPC channel and MONGODB_URI');

  const client = new MongoClient(uri);
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      await server.stop({ timeout: 2_000 }).catch(() => undefined);
      await client.close().catch(() => undefined);
      process.exit(0);
    })());
  process.on('disconnect', () => void stop());
  process.on('SIGTERM', () => void stop());

  // What this worker saw, for the demo's observer: each handler's time inside its critical
  // section, how each acquisition that had to wait was to be woken, and its first errors.
  const report: WorkerReport = { pid: process.pid, sections: [], waits: { local: 0, stream: 0, polling: 0 }, errors: [] };
  subscribe(CHANNELS.wait, (event) => void report.waits[(event as WaitEvent).wakeUp]++);

  await client.connect();
  const accounts = client.db(DEMO_DB).collection('accounts');
  const lock = writeLock({ collection: accounts, locktimeout: 5_000, boom: Boom });

  /** A handler that moves `amount` on the locked account: read by the acquisition, written by the release. */
  const move =
    (amount: number) =>
    async (request: Hapi.Request): Promise<unknown> => {
      const { lock: held, document } = lockOf(request);
      const entered = monotonicUs();
      const lockedMs = Date.now() - request.info.received; // from the request's arrival to here: acquiring, waiting included
      const next = (document?.balance as number) + amount;
      await sleep(WORK_MS);
      report.sections.push([request.params.id as string, entered, monotonicUs()]);
      if (next < 0) throw Boom.badData('insufficient funds'); // released, nothing written
      const answer: MoveAnswer = { balance: next, fence: held.fence, lockedMs };
      // Applied by the release, in the same atomic write, only while the lock is still held.
      return commit({ $set: { balance: next }, $push: { ops: request.query.op as string, fences: held.fence } }, answer);
    };

  // A 500 breaks an invariant ('every request answered'): the demo prints why, for the first few.
  server.events.on({ name: 'request', channels: 'error' }, (request, event) => {
    if (report.errors.length < 3) report.errors.push(`${request.method.toUpperCase()} ${request.path}: ${inspect(event.error, { depth: 2 })}`);
  });
  await server.register({ plugin: monglockPlugin });
  const filter = (request: Hapi.Request): object => ({ _id: request.params.id });
  server.route(
    ROUTES.map((route) => ({
      method: 'POST',
      path: `/accounts/{id}/${route.path}`,
      options: { plugins: { monglock: { lock, filter, document: { balance: 1 }, wait: route.wait } }, handler: move(route.amount) },
    })),
  );
  await server.start();

  process.on('message', (message: WorkerMessage) => {
    if (message === 'report') send({ type: 'report', report });
  });
  send({ type: 'ready', port: server.info.port as number });
}

main().catch((error: unknown) => {
  console.error(`[worker ${process.pid}]`, error);
  process.exit(1);
});
