/**
 * `npm run bench:transfer`: transfers between accounts, two documents locked at once. 8 account
 * documents, 16 workers (in one process, and as 4 processes × 4 workers), each repeatedly moving 1
 * unit between two distinct random accounts, behind a {@link MajorityProxy} that holds every
 * majority write's reply for L = 0, 2 and 5 ms. Contenders: monglock's `usingAll` + `commitAll`;
 * `acquireAll` with guarded updates; monglock's writeLock taken twice in sorted order, waiting
 * while holding the first (what a user without `acquireAll` writes); and the two fastest safe
 * peers of bench/contenders.ts, both locks tried in sorted order, the first given back when the
 * second is refused, retried after the shared backoff, then the two updates, then the two
 * releases. Rounds alternate the contenders; the tables give the median and the min–max of
 * transfers per second, the MongoDB commands per transfer by phase (driver command monitoring,
 * each command attributed to its transfer's phase) and the majority writes per transfer (counted
 * by the proxy), then each contender uncontended.
 * After every run the money must be conserved, every account's balance must match the transfers
 * the workers made, and no account may have had two holders at once: otherwise the run fails.
 * Writes bench/results/transfer.md and .json (with `--smoke`: .cache/bench-transfer-smoke/, a
 * seconds-long run at L = 0 and 5).
 * Usage: transfer.ts [--smoke] [--rounds N] [--seconds S] [--delays 0,2,5] [--out DIR]
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient, type Collection, type Document } from 'mongodb';
import { acquireAll, commitAll, usingAll, writeLock } from '../lib';
import { retryDelay } from '../lib/waiting/wait-options';
import { startMongoBackend } from '../support/mongo-backend';
import { contenders as lockContenders, type Contender, type Release } from './contenders';
import { ChildPool, countsAsCommand, loadAverage, median, serveTasks, spread } from './harness';
import { MajorityProxy } from './majority-proxy';

const ACCOUNTS = Array.from({ length: 8 }, (_, i) => `acct-${i}`);
const INITIAL_BALANCE = 1_000;
const WORKERS = 16;
const LEASE = 30_000;
const WAIT = 600_000;

/** The contenders, and the critical path of an uncontended transfer of each (from its code). */
const CONTENDERS = {
  'monglock usingAll + commitAll': 'acquire first · acquire second · commit first · commit second: 4 round trips, each a majority wait',
  'monglock acquireAll + guarded updates': 'acquire first · acquire second · both guarded updates at once · both releases at once (w: 1): 4 round trips, 3 of them majority waits',
  'monglock writeLock ×2, sorted': 'acquire first · acquire second · both commits (release with update) at once: 3 round trips, each a majority wait',
  'mongo-locks (coyotte508) ×2': 'lock first · lock second · both updates at once · both releases at once: 4 round trips, each a majority wait',
  'mongo-lock (andrasq) ×2, w: majority': 'lock first · lock second · both updates at once · both releases at once: 4 round trips, each a majority wait',
} as const;
type ContenderName = keyof typeof CONTENDERS;
const NAMES = Object.keys(CONTENDERS) as ContenderName[];
/** The contender of bench/contenders.ts behind each peer. */
const PEERS: Partial<Record<ContenderName, string>> = {
  'mongo-locks (coyotte508) ×2': 'mongo-locks (coyotte508)',
  'mongo-lock (andrasq) ×2, w: majority': 'mongo-lock (andrasq), w: majority',
};

type Phase = 'acquire' | 'commit' | 'release';
type Counts = Record<Phase | 'other', number>;

/** What a transfer tells the harness as it goes (the phase its commands are counted in, and when it held both documents). */
interface Steps {
  /** Both documents are held: the holding interval opens, and what follows is the commit or update phase. */
  held(): void;
  /** The holding interval closes (before anything is committed by a release, or released). */
  leaving(): void;
  /** What follows are plain releases. */
  releasing(): void;
}
type Transfer = (from: string, to: string, steps: Steps) => Promise<void>;

const inc = (amount: number): Document => ({ $inc: { balance: amount } });
const MAJORITY = { writeConcern: { w: 'majority' as const } };

/** One transfer of `name` on the `accounts` documents (a peer keeps its locks in `locks`). */
async function transferOf(name: ContenderName, accounts: Collection<Document>, locks: Collection<Document>): Promise<Transfer> {
  const lock = writeLock({ collection: accounts, locktimeout: LEASE });
  const pair = (from: string, to: string) => [{ lock, filter: { _id: from } }, { lock, filter: { _id: to } }] as const;
  switch (name) {
    case 'monglock usingAll + commitAll':
      return (from, to, steps) =>
        usingAll(pair(from, to), { wait: WAIT, document: { balance: 1 } }, () => {
          steps.held();
          steps.leaving();
          return commitAll([inc(-1), inc(1)]);
        });
    case 'monglock acquireAll + guarded updates':
      return async (from, to, steps) => {
        const group = await acquireAll(pair(from, to), { wait: WAIT });
        steps.held();
        try {
          const updated = await Promise.all(group.map((handle, i) => accounts.updateOne(handle.guard(), inc(i === 0 ? -1 : 1), MAJORITY)));
          if (updated.some((result) => result.matchedCount !== 1)) throw new Error('a guarded update matched nothing: a lock was lost');
        } finally {
          steps.leaving();
          steps.releasing();
          await group.release();
        }
      };
    case 'monglock writeLock ×2, sorted':
      return async (from, to, steps) => {
        const [first, second] = [from, to].sort();
        const a = await lock.acquire({ _id: first! }, { wait: WAIT });
        const b = await lock.acquire({ _id: second! }, { wait: WAIT }).catch(async (error: unknown) => {
          await a.release();
          throw error;
        });
        steps.held();
        steps.leaving();
        await Promise.all([a.release({ update: inc(first === from ? -1 : 1) }), b.release({ update: inc(second === from ? -1 : 1) })]);
      };
    default:
      return peerTransfer(await peerOf(name, accounts, locks), accounts);
  }
}

/** The peer behind `name`, prepared on `locks`. */
async function peerOf(name: ContenderName, accounts: Collection<Document>, locks: Collection<Document>): Promise<Contender> {
  const peer = (await lockContenders()).find((contender) => contender.name === PEERS[name]);
  if (!peer) throw new Error(`no contender ${PEERS[name]} in bench/contenders.ts`);
  await peer.prepare(locks, ACCOUNTS, accounts);
  return peer;
}

/**
 * A peer's transfer: both locks tried in sorted order, never waiting while holding one: when the
 * second is refused the first is given back, and the pair is tried again after the shared backoff
 * of bench/contenders.ts (monglock's: 4 ms doubling to 150 ms, jittered). Then both updates
 * (majority) at once, then both releases at once.
 */
function peerTransfer(peer: Contender, accounts: Collection<Document>): Transfer {
  const lockBoth = async (first: string, second: string): Promise<[Release, Release]> => {
    for (let attempt = 1; ; attempt++) {
      const releaseFirst = await peer.tryLock(first);
      if (releaseFirst) {
        const releaseSecond = await peer.tryLock(second).catch(async (error: unknown) => {
          await releaseFirst();
          throw error;
        });
        if (releaseSecond) return [releaseFirst, releaseSecond];
        await releaseFirst();
      }
      await new Promise((resolve) => setTimeout(resolve, retryDelay(attempt)));
    }
  };
  return async (from, to, steps) => {
    const [first, second] = [from, to].sort();
    const [releaseFirst, releaseSecond] = await lockBoth(first!, second!);
    steps.held();
    try {
      await Promise.all([accounts.updateOne({ _id: from as never }, inc(-1), MAJORITY), accounts.updateOne({ _id: to as never }, inc(1), MAJORITY)]);
    } finally {
      steps.leaving();
      steps.releasing();
      await Promise.all([releaseFirst(), releaseSecond()]);
    }
  };
}

interface Task {
  readonly uri: string;
  readonly db: string;
  readonly accounts: string;
  readonly locks: string;
  readonly contender: ContenderName;
  readonly workers: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Stop after this many transfers (the uncontended measurement), else at the end of the window. */
  readonly count?: number;
}

interface Outcome {
  /** Transfers that ended inside the measured window (after the warm-up). */
  readonly measured: number;
  /** Every transfer made, warm-up included (each started one is finished). */
  readonly total: number;
  /** Commands of all of them, by phase. */
  readonly commands: Counts;
  /** Each account's change by this process's transfers. */
  readonly net: Record<string, number>;
  /** [account, from, to]: when a transfer held the account, by the machine's monotonic clock (ms). */
  readonly holds: Array<[string, number, number]>;
  /** ms per transfer (with `count`). */
  readonly latencies: number[];
}

/** The machine's monotonic clock, the same in every process, in ms. */
const now = (): number => Number(process.hrtime.bigint()) / 1e6;

/** A child's share of a run: connects and prepares, then (at go) its workers transfer until the window ends. */
async function prepareTask(task: Task): Promise<() => Promise<Outcome>> {
  const client = await MongoClient.connect(task.uri, { monitorCommands: true, maxPoolSize: task.workers * 2 + 2 });
  const db = client.db(task.db);
  const transfer = await transferOf(task.contender, db.collection(task.accounts), db.collection(task.locks));
  const phases = new AsyncLocalStorage<{ phase: Phase }>();
  return async () => {
    const commands: Counts = { acquire: 0, commit: 0, release: 0, other: 0 };
    client.on('commandStarted', (event) => {
      if (countsAsCommand(event)) commands[phases.getStore()?.phase ?? 'other']++;
    });
    const net: Record<string, number> = Object.fromEntries(ACCOUNTS.map((account) => [account, 0]));
    const holds: Array<[string, number, number]> = [];
    const latencies: number[] = [];
    let measured = 0;
    let total = 0;
    const start = now();
    const warm = start + task.warmupMs;
    const end = warm + task.durationMs;
    await Promise.all(
      Array.from({ length: task.workers }, async () => {
        while (now() < end && (task.count === undefined || total < task.count)) {
          const from = ACCOUNTS[Math.floor(Math.random() * ACCOUNTS.length)]!;
          const others = ACCOUNTS.filter((account) => account !== from);
          const to = others[Math.floor(Math.random() * others.length)]!;
          const state = { phase: 'acquire' as Phase };
          let held = NaN;
          let left = NaN;
          const began = now();
          await phases.run(state, () =>
            transfer(from, to, {
              held: () => {
                state.phase = 'commit';
                held = now();
              },
              leaving: () => void (left = now()),
              releasing: () => void (state.phase = 'release'),
            }),
          );
          const ended = now();
          total++;
          net[from]!--;
          net[to]!++;
          holds.push([from, held, left], [to, held, left]);
          if (ended >= warm && ended <= end) measured++;
          if (task.count !== undefined) latencies.push(ended - began);
        }
      }),
    );
    await client.close();
    return { measured, total, commands, net, holds, latencies };
  };
}

/** One measured run, checked. */
interface Run {
  readonly perSecond: number;
  readonly transfers: number;
  /** Commands per transfer, by phase. */
  readonly commands: Counts;
  /** Writes the proxy held, per transfer. */
  readonly majority: number;
  /** The most transfers that held one account at once (1, or the run failed). */
  readonly mostAtOnce: number;
  readonly latencyP50: number;
}

interface Bench {
  readonly pool: ChildPool<Task, Outcome>;
  readonly direct: MongoClient;
  readonly db: string;
  next: number;
}

/** Runs `contender` on fresh accounts through `proxy`, on `processes` children sharing `workers`; fails unless the money is conserved. */
async function runOnce(bench: Bench, proxy: MajorityProxy, contender: ContenderName, processes: number, workers: number, timing: Pick<Task, 'warmupMs' | 'durationMs' | 'count'>): Promise<Run> {
  const id = bench.next++;
  const db = bench.direct.db(bench.db);
  const accounts = db.collection(`accounts_${id}`);
  await accounts.insertMany(ACCOUNTS.map((_id) => ({ _id: _id as never, balance: INITIAL_BALANCE })));
  // A peer's indexes, made once before its processes prepare.
  if (PEERS[contender]) await peerOf(contender, accounts, db.collection(`locks_${id}`));
  const task: Task = { uri: proxy.uri(), db: bench.db, accounts: accounts.collectionName, locks: `locks_${id}`, contender, workers: workers / processes, ...timing };
  let majorityBefore = 0;
  const outcomes = await bench.pool.run(
    Array.from({ length: processes }, () => task),
    () => (majorityBefore = proxy.counts.majority),
  );
  const majority = proxy.counts.majority - majorityBefore;
  const total = outcomes.reduce((sum, outcome) => sum + outcome.total, 0);
  const where = `${contender}, L = ${proxy.delayMs} ms, ${processes} × ${workers / processes}`;
  await checkAccounts(accounts, outcomes, where);
  const mostAtOnce = mostHoldersAtOnce(outcomes.flatMap((outcome) => outcome.holds));
  if (mostAtOnce > 1) throw new Error(`${where}: ${mostAtOnce} transfers held one account at once`);
  await accounts.drop();
  const commands: Counts = { acquire: 0, commit: 0, release: 0, other: 0 };
  for (const outcome of outcomes) for (const phase of Object.keys(commands) as Array<keyof Counts>) commands[phase] += outcome.commands[phase] / total;
  return {
    perSecond: outcomes.reduce((sum, outcome) => sum + outcome.measured, 0) / (timing.durationMs / 1000),
    transfers: total,
    commands,
    majority: majority / total,
    mostAtOnce,
    latencyP50: median(outcomes.flatMap((outcome) => outcome.latencies)),
  };
}

/** Fails loudly unless the balances add up to what they started with, and each account changed by exactly the transfers made. */
async function checkAccounts(accounts: Collection<Document>, outcomes: readonly Outcome[], where: string): Promise<void> {
  const docs = await accounts.find().toArray();
  const sum = docs.reduce((total, doc) => total + (doc.balance as number), 0);
  if (docs.length !== ACCOUNTS.length || sum !== ACCOUNTS.length * INITIAL_BALANCE) {
    throw new Error(`${where}: money not conserved: ${docs.length} accounts hold ${sum}, not ${ACCOUNTS.length * INITIAL_BALANCE}`);
  }
  for (const doc of docs) {
    const expected = INITIAL_BALANCE + outcomes.reduce((total, outcome) => total + outcome.net[doc._id as unknown as string]!, 0);
    if (doc.balance !== expected) throw new Error(`${where}: account ${String(doc._id)} holds ${doc.balance}, the transfers made say ${expected}`);
  }
}

/** The most intervals of one account open at once. */
function mostHoldersAtOnce(holds: ReadonlyArray<[string, number, number]>): number {
  let most = 0;
  for (const account of ACCOUNTS) {
    const events = holds
      .filter(([held]) => held === account)
      .flatMap(([, from, to]) => [{ at: from, delta: 1 }, { at: to, delta: -1 }])
      .sort((a, b) => a.at - b.at || a.delta - b.delta);
    let open = 0;
    for (const event of events) most = Math.max(most, (open += event.delta));
  }
  return most;
}

interface Row {
  readonly contender: ContenderName;
  readonly delayMs: number;
  readonly processes: number;
  readonly perSecond: number[];
  readonly commands: Counts[];
  readonly majority: number[];
  readonly transfers: number[];
  mostAtOnce: number;
}

interface Uncontended {
  readonly contender: ContenderName;
  readonly criticalPath: string;
  readonly delayMs: number;
  readonly p50Ms: number;
  readonly commands: Counts;
  readonly majority: number;
}

async function main(): Promise<void> {
  const smoke = process.argv.includes('--smoke');
  const flag = (name: string): string | undefined => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined);
  const rounds = Number(flag('--rounds') ?? (smoke ? 1 : 3));
  const durationMs = Number(flag('--seconds') ?? (smoke ? 0.4 : 4)) * 1000;
  const warmupMs = smoke ? 100 : 500;
  const delays = (flag('--delays') ?? (smoke ? '0,5' : '0,2,5')).split(',').map(Number);
  const out = flag('--out') ?? (smoke ? join('.cache', 'bench-transfer-smoke') : join('bench', 'results'));
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  console.error(`MongoDB: ${backend.description}${smoke ? ' (smoke run)' : ''}`);
  const { hostname, port } = new URL(backend.uri.replace(/^mongodb:/, 'http:'));
  const proxies = delays.map((delayMs) => new MajorityProxy(hostname, Number(port), delayMs));
  const bench: Bench = { pool: ChildPool.start<Task, Outcome>(__filename, 4), direct: await MongoClient.connect(backend.uri), db: `monglock_bench_transfer_${Date.now()}`, next: 0 };
  const loads: string[] = [];
  try {
    for (const proxy of proxies) await proxy.start();
    const rows: Row[] = [];
    for (const proxy of proxies) {
      for (const processes of [1, 4]) {
        for (const contender of NAMES) rows.push({ contender, delayMs: proxy.delayMs, processes, perSecond: [], commands: [], majority: [], transfers: [], mostAtOnce: 0 });
      }
    }
    for (let round = 0; round < rounds; round++) {
      for (const proxy of proxies) {
        loads.push(loadAverage());
        console.error(`round ${round + 1}/${rounds}, L = ${proxy.delayMs} ms (load average ${loads.at(-1)})`);
        for (const processes of [1, 4]) {
          for (const contender of round % 2 === 0 ? NAMES : [...NAMES].reverse()) {
            const run = await runOnce(bench, proxy, contender, processes, WORKERS, { warmupMs, durationMs });
            const row = rows.find((r) => r.contender === contender && r.delayMs === proxy.delayMs && r.processes === processes)!;
            row.perSecond.push(run.perSecond);
            row.commands.push(run.commands);
            row.majority.push(run.majority);
            row.transfers.push(run.transfers);
            row.mostAtOnce = Math.max(row.mostAtOnce, run.mostAtOnce);
            const c = run.commands;
            console.error(
              `  ${contender}, ${processes} × ${WORKERS / processes}: ${run.perSecond.toFixed(0)}/s, commands ${c.acquire.toFixed(2)} acquire / ${c.commit.toFixed(2)} commit / ${c.release.toFixed(2)} release / ${c.other.toFixed(2)} other, ${run.majority.toFixed(2)} majority`,
            );
          }
        }
      }
    }
    // Uncontended: one worker, one transfer at a time.
    const uncontended: Uncontended[] = [];
    for (const proxy of proxies) {
      for (const contender of NAMES) {
        const run = await runOnce(bench, proxy, contender, 1, 1, { warmupMs: 0, durationMs: 60_000, count: smoke ? 10 : 60 });
        uncontended.push({ contender, criticalPath: CONTENDERS[contender], delayMs: proxy.delayMs, p50Ms: run.latencyP50, commands: run.commands, majority: run.majority });
      }
    }
    loads.push(loadAverage());
    const table = render({ backend: backend.description, rounds, durationMs, delays, loads, rows, uncontended });
    console.log(table);
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'transfer.md'), table);
    const settings = { accounts: ACCOUNTS.length, initialBalance: INITIAL_BALANCE, workers: WORKERS, rounds, durationMs, warmupMs, delays };
    writeFileSync(join(out, 'transfer.json'), `${JSON.stringify({ backend: backend.description, date: new Date().toISOString(), machine: `${process.platform} ${process.arch}, Node ${process.version}`, settings, loadAverages: loads, conserved: true, rows, uncontended }, null, 2)}\n`);
  } finally {
    bench.pool.stop();
    await bench.direct.db(bench.db).dropDatabase().catch(() => undefined);
    await bench.direct.close();
    for (const proxy of proxies) await proxy.stop();
    await backend.stop();
  }
}

/** The tables of transfer.md. */
function render(run: { backend: string; rounds: number; durationMs: number; delays: number[]; loads: string[]; rows: Row[]; uncontended: Uncontended[] }): string {
  const { delays, rows } = run;
  const row = (contender: ContenderName, delayMs: number, processes: number): Row => rows.find((r) => r.contender === contender && r.delayMs === delayMs && r.processes === processes)!;
  const perTransfer = (r: Row): string => {
    const phase = (p: keyof Counts): number => median(r.commands.map((c) => c[p]));
    const acquired = median(run.uncontended.filter((u) => u.contender === r.contender).map((u) => u.commands.acquire));
    return `${acquired.toFixed(2)} / ${(phase('acquire') - acquired).toFixed(2)} / ${phase('commit').toFixed(2)} / ${phase('release').toFixed(2)}`;
  };
  const lines = [
    `Transfers: ${ACCOUNTS.length} accounts, ${WORKERS} workers each moving 1 unit between two distinct random accounts, ${run.rounds} round(s) of ${run.durationMs / 1000} s (after a warm-up) per contender, level and process split, contenders alternating, on ${run.backend}, behind a proxy holding each majority write's reply for L ms. Money conserved, every balance matching the transfers made, and at most one holder per account at once, in every run. Load average (1, 5, 15 min) at each level of each round: ${run.loads.join('; ')}.`,
    '',
    '**Transfers per second**, median (min–max):',
    '',
    `| contender | processes × workers | ${delays.map((d) => `L = ${d} ms`).join(' | ')} |`,
    `|---|---|${delays.map(() => '---|').join('')}`,
    ...[1, 4].flatMap((processes) => NAMES.map((name) => `| ${name} | ${processes} × ${WORKERS / processes} | ${delays.map((d) => spread(row(name, d, processes).perSecond)).join(' | ')} |`)),
    '',
    '**Cost per transfer under contention** (medians over the rounds): MongoDB commands, split into the acquisitions that won (as many as uncontended), everything else sent while acquiring (refused attempts, their explanations, a first lock given back, reads while waiting), the commits or updates, and the plain releases; and the writes whose reply the proxy held for a majority (refused ones included):',
    '',
    `| contender | processes × workers | ${delays.map((d) => `L = ${d}: acquire / refused / commit or update / release`).join(' | ')} | ${delays.map((d) => `L = ${d}: majority waits`).join(' | ')} |`,
    `|---|---|${delays.map(() => '---|---|').join('')}`,
    ...[1, 4].flatMap((processes) =>
      NAMES.map(
        (name) =>
          `| ${name} | ${processes} × ${WORKERS / processes} | ${delays.map((d) => perTransfer(row(name, d, processes))).join(' | ')} | ${delays.map((d) => median(row(name, d, processes).majority).toFixed(2)).join(' | ')} |`,
      ),
    ),
    '',
    '**Uncontended**: one worker, one transfer at a time: the round trips on the critical path (from the code), the commands and majority waits counted, and the median time of a transfer:',
    '',
    `| contender | critical path | commands: acquire / commit or update / release | majority waits | ${delays.map((d) => `p50 ms, L = ${d}`).join(' | ')} |`,
    `|---|---|---|---|${delays.map(() => '---|').join('')}`,
    ...NAMES.map((name) => {
      const mine = run.uncontended.filter((u) => u.contender === name);
      const c = mine[0]!.commands;
      return `| ${name} | ${CONTENDERS[name]} | ${c.acquire.toFixed(2)} / ${c.commit.toFixed(2)} / ${c.release.toFixed(2)} | ${median(mine.map((u) => u.majority)).toFixed(2)} | ${delays.map((d) => mine.find((u) => u.delayMs === d)!.p50Ms.toFixed(2)).join(' | ')} |`;
    }),
    '',
  ];
  return lines.join('\n');
}

if (process.argv[2] === '--child') serveTasks(prepareTask);
else
  main().then(
    // Some peers leave timers behind them: exit once the results are written.
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
