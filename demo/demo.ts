/**
 * `npm run demo`: a hapi server whose routes lock MongoDB documents with monglock, hammered by
 * simulated clients over real HTTP. Starts the embedded MongoDB (a real mongod from
 * mongodb-memory-server; MONGODB_URI overrides it; offline, the test suite's fallback), prints a
 * live progress line and a summary, and exits non-zero if an invariant broke.
 */
import { Agent, request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';
import { lockOf, monglockPlugin } from 'monglock/hapi';
import { startMongoBackend } from '../support/mongo-backend';

const ACCOUNTS = ['alice', 'bob', 'carol', 'dave', 'erin'];
const REQUESTS = Number(process.env.DEMO_REQUESTS ?? 3000);
const CLIENTS = Number(process.env.DEMO_CLIENTS ?? 64);

interface Stats {
  sent: number;
  ok: number;
  conflicts: number;
  errors: number;
  waited: number;
  latencies: number[];
}

async function main(): Promise<number> {
  const started = Date.now();
  const backend = await startMongoBackend((line) => console.log(`[backend] ${line}`));
  console.log(`MongoDB: ${backend.description}`);
  const client = new MongoClient(backend.uri);
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  try {
    await client.connect();
    const accounts = client.db('monglock_demo').collection('accounts');
    await accounts.deleteMany({});
    await accounts.insertMany(ACCOUNTS.map((name) => ({ _id: name as never, balance: 0, fences: [] as number[] })));
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });

    // What the handlers see, checked by an observer independent of the lock.
    const inside = new Map<string, number>();
    let mostInside = 0;
    const entryFences = new Map<string, number[]>(ACCOUNTS.map((name) => [name, []]));
    let deposits = 0;

    const deposit = async (request: Hapi.Request): Promise<object> => {
      const id = request.params.id as string;
      const { lock: held, guard } = lockOf(request);
      const now = (inside.get(id) ?? 0) + 1;
      inside.set(id, now);
      mostInside = Math.max(mostInside, now);
      entryFences.get(id)?.push(held.fence);
      try {
        const account = await accounts.findOne({ _id: id as never });
        const written = await accounts.updateOne(guard(), { $set: { balance: (account?.balance as number) + 1 }, $push: { fences: held.fence } as never });
        if (written.modifiedCount === 1) deposits++;
        return { balance: (account?.balance as number) + 1, fence: held.fence };
      } finally {
        inside.set(id, (inside.get(id) ?? 1) - 1);
      }
    };

    await server.register({ plugin: monglockPlugin });
    const filter = (request: Hapi.Request): object => ({ _id: request.params.id });
    server.route([
      { method: 'POST', path: '/accounts/{id}/deposit', options: { plugins: { monglock: { lock, filter, wait: 10_000 } }, handler: deposit } },
      { method: 'POST', path: '/accounts/{id}/deposit-now', options: { plugins: { monglock: { lock, filter } }, handler: deposit } },
    ]);
    await server.start();
    console.log(`hapi server on ${server.info.uri}: ${REQUESTS} requests from ${CLIENTS} concurrent clients on ${ACCOUNTS.length} accounts`);

    const stats = await fire(server.info.port as number, started);
    const final = await accounts.find().toArray();
    const balances = final.reduce((sum, doc) => sum + (doc.balance as number), 0);
    const fencesOk = [...entryFences.values(), ...final.map((doc) => doc.fences as number[])].every(strictlyIncreasing);
    const sorted = [...stats.latencies].sort((a, b) => a - b);
    const pct = (p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

    const checks = [
      ['every request answered', stats.ok + stats.conflicts === REQUESTS && stats.errors === 0],
      ['most handlers inside one document at once = 1', mostInside === 1],
      ['fencing tokens strictly increasing per document', fencesOk],
      ['no lost update (sum of balances = deposits = locks won)', balances === deposits && deposits === stats.ok],
    ] as const;
    const rows: Array<[string, string]> = [
      ['MongoDB', backend.description],
      ['requests', String(REQUESTS)],
      ['locks won (200)', String(stats.ok)],
      ['refused (409)', String(stats.conflicts)],
      ['waited for the lock (wait route, > 5 ms)', String(stats.waited)],
      ['errors', String(stats.errors)],
      ['most handlers inside one document at once', String(mostInside)],
      ['fencing tokens strictly increasing', fencesOk ? 'yes' : 'NO'],
      ['sum of balances / deposits', `${balances} / ${deposits}`],
      ['latency p50 / p99', `${pct(50)} ms / ${pct(99)} ms`],
      ['elapsed', `${((Date.now() - started) / 1000).toFixed(1)} s`],
    ];
    printTable(rows);
    const broken = checks.filter(([, ok]) => !ok);
    for (const [name] of broken) console.error(`INVARIANT BROKEN: ${name}`);
    if (broken.length === 0) console.log('All invariants held.');
    return broken.length === 0 ? 0 : 1;
  } finally {
    await server.stop({ timeout: 2_000 });
    await client.close();
    await backend.stop();
  }
}

async function fire(port: number, started: number): Promise<Stats> {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const stats: Stats = { sent: 0, ok: 0, conflicts: 0, errors: 0, waited: 0, latencies: [] };
  const progress = setInterval(() => printProgress(stats, started), process.stdout.isTTY ? 250 : 2_000);
  const clientLoop = async (): Promise<void> => {
    while (stats.sent < REQUESTS) {
      stats.sent++;
      const account = ACCOUNTS[Math.floor(Math.random() * ACCOUNTS.length)]!;
      const waits = Math.random() < 0.7;
      const begun = Date.now();
      const status = await post(agent, port, `/accounts/${account}/${waits ? 'deposit' : 'deposit-now'}`).catch(() => 0);
      const took = Date.now() - begun;
      stats.latencies.push(took);
      if (status === 200) stats.ok++;
      else if (status === 409) stats.conflicts++;
      else stats.errors++;
      if (waits && status === 200 && took > 5) stats.waited++;
    }
  };
  try {
    await Promise.all(Array.from({ length: CLIENTS }, clientLoop));
  } finally {
    clearInterval(progress);
    agent.destroy();
  }
  printProgress(stats, started);
  process.stdout.write('\n');
  return stats;
}

function post(agent: Agent, port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST', agent }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

function printProgress(stats: Stats, started: number): void {
  const done = stats.ok + stats.conflicts + stats.errors;
  const line = `  ${done}/${REQUESTS} answered  200: ${stats.ok}  409: ${stats.conflicts}  errors: ${stats.errors}  ${((Date.now() - started) / 1000).toFixed(1)} s`;
  process.stdout.write(process.stdout.isTTY ? `\r${line}` : `${line}\n`);
}

function printTable(rows: Array<[string, string]>): void {
  const width = Math.max(...rows.map(([name]) => name.length));
  console.log(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|`);
  for (const [name, value] of rows) console.log(`| ${name.padEnd(width)} | ${value} |`);
  console.log('');
}

function strictlyIncreasing(values: number[]): boolean {
  return values.every((value, i) => i === 0 || value > values[i - 1]!);
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
