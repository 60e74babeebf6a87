/**
 * `npm run demo`: one lock, several processes. Starts the embedded MongoDB (a real mongod from
 * mongodb-memory-server; MONGODB_URI overrides it; offline, the test suite's fallback), seeds a
 * few accounts, forks worker processes (demo/worker.ts: each a hapi server whose routes lock the
 * account they change, read it with the acquisition and write it with the release), and sends
 * them requests from simulated HTTP clients, round-robin. Then it checks, with an observer
 * independent of the lock (the final documents, the clients' answers, the handlers' times on the
 * machine's monotonic clock), that no update was lost, every answered operation landed exactly
 * once and fencing tokens grew in commit order; prints a summary; stops every process it
 * started (also on failure and Ctrl-C); and exits non-zero if an invariant broke.
 *
 * DEMO_REQUESTS, DEMO_CLIENTS, DEMO_WORKERS and DEMO_WORK_MS (the work inside each critical
 * section) change the load.
 */
import { Agent, request as httpRequest } from 'node:http';
import { MongoClient } from 'mongodb';
import { startMongoBackend, type MongoBackend } from '../support/mongo-backend';
import { DEMO_DB, ROUTES, envInteger, type MoveAnswer, type Route, type WorkerReport } from './protocol';
import { Workers, type Worker } from './workers';

const ACCOUNTS = ['alice', 'bob', 'carol', 'dave', 'erin'];
const REQUESTS = envInteger('DEMO_REQUESTS', 3000, 1);
const CLIENTS = envInteger('DEMO_CLIENTS', 64, 1);
const WORKERS = envInteger('DEMO_WORKERS', 3, 1);
envInteger('DEMO_WORK_MS', 1, 0); // read by the workers: refused here, before anything starts

interface Account {
  _id: string;
  balance: number;
  /** The operation ids the commits pushed, in commit order. */
  ops: string[];
  /** The fencing tokens the commits pushed, in commit order. */
  fences: number[];
}

/** One request as its client saw it. */
interface Outcome {
  readonly op: string;
  readonly account: string;
  readonly route: Route;
  readonly status: number;
  /** ms from sending the request to reading its whole answer. */
  readonly ms: number;
  readonly answer?: MoveAnswer;
}

const cleanups: Array<() => Promise<unknown>> = [];
let cleaning: Promise<void> | undefined;
let interrupted = false;

/** Stops what was started, last first, once (from main's `finally` and from a signal). */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => console.error(error));
  })();
  return cleaning;
}

async function main(): Promise<number> {
  const began = performance.now();
  const backend = await startMongoBackend((line) => console.log(`[backend] ${line}`));
  cleanups.push(() => backend.stop());
  console.log(`MongoDB: ${backend.description}`);
  const client = new MongoClient(backend.uri);
  cleanups.push(() => client.close());
  await client.connect();
  const accounts = client.db(DEMO_DB).collection<Account>('accounts');
  await accounts.deleteMany({});
  await accounts.insertMany(ACCOUNTS.map((name) => ({ _id: name, balance: 0, ops: [], fences: [] })));

  const workers = new Workers();
  cleanups.push(() => workers.stop());
  const started = await workers.start(WORKERS, { ...process.env, MONGODB_URI: backend.uri });
  const startupMs = performance.now() - began;
  console.log(
    `${WORKERS} worker processes (hapi servers, pids ${started.map((w) => w.pid).join(', ')}) ready after ${seconds(startupMs)}; ` +
      `${REQUESTS} requests from ${CLIENTS} concurrent clients, round-robin over the workers, on ${ACCOUNTS.length} accounts`,
  );

  const loadBegan = performance.now();
  const outcomes = await fire(started, loadBegan);
  const loadMs = performance.now() - loadBegan;
  if (interrupted) return 130;
  const reports = await Promise.all(started.map((worker) => worker.report()));
  const left = await workers.stop();
  const final = await accounts.find().toArray();
  return summarize(backend, outcomes, reports, final, { startupMs, loadMs, totalMs: performance.now() - began, left });
}

function summarize(backend: MongoBackend, outcomes: Outcome[], reports: WorkerReport[], final: Account[], times: { startupMs: number; loadMs: number; totalMs: number; left: number }): number {
  const ok = outcomes.filter((outcome) => outcome.status === 200);
  const errors = outcomes.filter((outcome) => ![200, 409, 422].includes(outcome.status)).length;
  const mostInside = mostAtOnce(reports.flatMap((report) => report.sections));

  // Per account: what landed (the document) against what the clients were told (200 answers).
  let exactlyOnce = true;
  let noLostUpdate = true;
  let fencesOk = true;
  for (const account of final) {
    const answered = ok.filter((outcome) => outcome.account === account._id).sort((a, b) => a.answer!.fence - b.answer!.fence);
    const landed = new Set(account.ops);
    exactlyOnce &&= landed.size === account.ops.length && landed.size === answered.length && answered.every((outcome) => landed.has(outcome.op));
    // In commit order, each section read the balance the one before it wrote.
    let running = 0;
    for (const outcome of answered) noLostUpdate &&= outcome.answer!.balance === (running += outcome.route.amount);
    noLostUpdate &&= account.balance === running;
    fencesOk &&= strictlyIncreasing(account.fences) && sameNumbers(account.fences, answered.map((outcome) => outcome.answer!.fence));
  }
  const balances = final.reduce((sum, account) => sum + account.balance, 0);
  const moved = ok.reduce((sum, outcome) => sum + outcome.route.amount, 0);
  const landedOps = final.reduce((sum, account) => sum + account.ops.length, 0);

  const checks = [
    ['every request answered (200, 409, or 422: insufficient funds)', errors === 0 && outcomes.length === REQUESTS],
    ['most handlers inside one document at once = 1, across all workers', mostInside <= 1],
    ['every 200 landed exactly once, and no refused request landed', exactlyOnce],
    ['no lost update: in commit order, each section read what the one before it wrote', noLostUpdate && balances === moved],
    ['fencing tokens strictly increasing per document, in commit order', fencesOk],
    ['every worker process tree stopped', times.left === 0],
  ] as const;

  const count = (route: Route, status: number): number => outcomes.filter((outcome) => outcome.route === route && outcome.status === status).length;
  const waited = reports.reduce(
    (sum, report) => ({ local: sum.local + report.waits.local, stream: sum.stream + report.waits.stream, polling: sum.polling + report.waits.polling }),
    { local: 0, stream: 0, polling: 0 },
  );
  const [waitRoute] = ROUTES;
  const waitOk = ok.filter((outcome) => outcome.route === waitRoute);
  const failFast = outcomes.filter((outcome) => outcome.route !== waitRoute);
  const rows: Array<[string, string]> = [
    ['MongoDB', backend.description],
    ['worker processes (hapi servers)', `${reports.length} (pids ${reports.map((report) => report.pid).join(', ')})`],
    ['requests (round-robin over the workers)', `${outcomes.length} from ${CLIENTS} clients`],
    ...ROUTES.map((route): [string, string] => [`${route.label}: 200 / 409${route.amount < 0 ? ' / 422' : ''}`, [200, 409, ...(route.amount < 0 ? [422] : [])].map((status) => count(route, status)).join(' / ')]),
    ['errors', String(errors)],
    ['waits for the lock: holder in the same worker / in another (woken by a change stream / by polling)', `${waited.local} / ${waited.stream} / ${waited.polling}`],
    ['most handlers inside one document at once', String(mostInside)],
    ['fencing tokens strictly increasing', fencesOk ? 'yes' : 'NO'],
    ['operations landed / answered 200', `${landedOps} / ${ok.length}`],
    ['sum of balances / what the 200s moved', `${balances} / ${moved}`],
    ['latency p50 / p99, wait route 200', percentiles(waitOk.map((outcome) => outcome.ms))],
    ['  of which waiting for the lock in the worker', percentiles(waitOk.map((outcome) => outcome.answer!.lockedMs))],
    ['latency p50 / p99, fail-fast routes (200 and 409)', percentiles(failFast.map((outcome) => outcome.ms))],
    ['throughput', `${Math.round(outcomes.length / (times.loadMs / 1000))} requests/s`],
    ['start-up (MongoDB, worker processes)', seconds(times.startupMs)],
    ['load', seconds(times.loadMs)],
    ['elapsed', seconds(times.totalMs)],
    ['worker process trees left running', String(times.left)],
  ];
  printTable(rows);
  console.log(
    'Latencies are what the clients saw, from sending a request to reading its whole answer (keep-alive\n' +
      'connections), measured only once every worker listened: starting MongoDB and the worker processes\n' +
      '(Node, TypeScript, connecting) is excluded and shown as start-up. On the wait route they include\n' +
      'the time each request queued for the lock inside its worker (the "waiting for the lock" row); a\n' +
      '409 of a fail-fast route is one refused acquisition. Each critical section is two commands: the\n' +
      'acquisition that returns the account, and the release that applies the commit.\n',
  );
  const broken = checks.filter(([, held]) => !held);
  for (const report of reports) for (const error of report.errors) console.error(`[worker ${report.pid}] ${error}`);
  for (const [name] of broken) console.error(`INVARIANT BROKEN: ${name}`);
  if (broken.length === 0) console.log('All invariants held.');
  return broken.length === 0 ? 0 : 1;
}

/** Sends REQUESTS requests from CLIENTS concurrent clients, request n to worker n mod WORKERS. */
async function fire(workers: Worker[], began: number): Promise<Outcome[]> {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const outcomes: Outcome[] = [];
  let sent = 0;
  const progress = setInterval(() => printProgress(outcomes, began), process.stdout.isTTY ? 250 : 2_000);
  const clientLoop = async (): Promise<void> => {
    while (sent < REQUESTS && !interrupted) {
      const n = sent++;
      const op = `op-${n}`;
      const account = ACCOUNTS[Math.floor(Math.random() * ACCOUNTS.length)]!;
      const route = pick();
      const sentAt = performance.now();
      const { status, body } = await post(agent, workers[n % workers.length]!.port, `/accounts/${account}/${route.path}?op=${op}`).catch(() => ({ status: 0, body: '' }));
      const ms = performance.now() - sentAt;
      outcomes.push({ op, account, route, status, ms, ...(status === 200 ? { answer: JSON.parse(body) as MoveAnswer } : {}) });
    }
  };
  try {
    await Promise.all(Array.from({ length: CLIENTS }, clientLoop));
  } finally {
    clearInterval(progress);
    agent.destroy();
  }
  printProgress(outcomes, began);
  process.stdout.write('\n');
  return outcomes;
}

function pick(): Route {
  let roll = Math.random();
  for (const route of ROUTES) if ((roll -= route.share) < 0) return route;
  return ROUTES[0];
}

function post(agent: Agent, port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST', agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The most sections of one account that overlap in time (1 if the lock excluded them). */
function mostAtOnce(sections: WorkerReport['sections']): number {
  let most = 0;
  for (const account of ACCOUNTS) {
    // Leaving sorts before entering at the same instant: touching sections do not overlap.
    const events = sections.filter(([name]) => name === account).flatMap(([, entered, left]) => [[entered, 1] as const, [left, -1] as const]);
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let inside = 0;
    for (const [, step] of events) most = Math.max(most, (inside += step));
  }
  return most;
}

function printProgress(outcomes: Outcome[], began: number): void {
  const count = (status: number): number => outcomes.filter((outcome) => outcome.status === status).length;
  const errors = outcomes.length - count(200) - count(409) - count(422);
  const line = `  ${outcomes.length}/${REQUESTS} answered  200: ${count(200)}  409: ${count(409)}  422: ${count(422)}  errors: ${errors}  ${seconds(performance.now() - began)}`;
  process.stdout.write(process.stdout.isTTY ? `\r${line}` : `${line}\n`);
}

function printTable(rows: Array<[string, string]>): void {
  const width = Math.max(...rows.map(([name]) => name.length));
  console.log(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|`);
  for (const [name, value] of rows) console.log(`| ${name.padEnd(width)} | ${value} |`);
  console.log('');
}

function percentiles(values: number[]): string {
  if (values.length === 0) return '-';
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number): string => (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0).toFixed(1);
  return `${at(50)} ms / ${at(99)} ms`;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

function strictlyIncreasing(values: number[]): boolean {
  return values.every((value, i) => i === 0 || value > values[i - 1]!);
}

function sameNumbers(a: number[], b: number[]): boolean {
  const sorted = (values: number[]): string => [...values].sort((x, y) => x - y).join(',');
  return a.length === b.length && sorted(a) === sorted(b);
}

for (const [name, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
  process.once(name, () => {
    interrupted = true;
    console.error(`\n${name}: stopping the workers and MongoDB`);
    void cleanUp().finally(() => process.exit(code));
  });
}

main()
  .finally(() => cleanUp())
  .then(
    (code) => {
      if (!interrupted) process.exit(code); // else the signal handler exits
    },
    (error: unknown) => {
      if (interrupted) return;
      console.error(error);
      process.exit(1);
    },
  );
