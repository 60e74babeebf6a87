/**
 * `npm run bench:uncontended`: one uncontended acquire + release, monglock (the built `dist/`)
 * beside its floors (bench/floors.ts: two majority writes, monglock's write concerns, monglock's
 * exact commands through the bare driver) and the peers that acquire safely, at L = 0, 2 and 5 ms
 * of modelled majority wait (at L = 0 no proxy; at L > 0 the majority proxy in a process of its
 * own); and one uncontended read-modify-write critical section (acquire, read the document, write
 * it, release: bench/workloads.ts), monglock folded (at its default write concerns, and acquired
 * at `w: 1`) beside the plain floor and the same peers. Each contender runs in a process of its
 * own, as a service loads one lock library: run in one shared process, after the other libraries
 * had run, monglock measured 1.25× its exact commands at L = 0, and 1.11–1.15× in processes of
 * their own. Each round measures every
 * contender once, in a rotated order, on a fresh collection: p50 of `--iterations` calls after a
 * warm-up. Figures are the median of the rounds' p50 with min–max, and the ratio of each round's
 * p50 to the median of each floor. Writes bench/results/uncontended.md and .json (or to `--out`),
 * then bench/targets.ts rewrites targets.md there.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { contenders } from './contenders';
import { argument, ChildPool, loadAverage, median, serveTasks, spread } from './harness';
import { startProxy } from './proxy-process';
import { writeTargets } from './targets';
import { latency, readModifyWrite } from './workloads';

/** The floors each figure is set against, by name. */
const FLOORS = ['floor: findOneAndUpdate', "floor: monglock's write concerns", "floor: monglock's exact commands"];

/** The contenders of the read-modify-write figure besides the peers. */
const RMW_OWN = ['floor: findOneAndUpdate', 'monglock writeLock', 'monglock writeLock folded, acquire w: 1'];

/** One figure: the p50 of `iterations` acquire + release (or read-modify-writes) of `contender`, in a child process. */
interface Task {
  readonly uri: string;
  readonly db: string;
  readonly contender: string;
  readonly iterations: number;
  readonly workload: 'lock' | 'rmw';
}

/** A child: measures one contender (always the same one: each child serves one library). */
function serveLatency(): void {
  const clients = new Map<string, MongoClient>();
  serveTasks<Task, number>(async (task) => {
    let client = clients.get(task.uri);
    if (!client) clients.set(task.uri, (client = await MongoClient.connect(task.uri)));
    const db = client.db(task.db);
    const contender = (await contenders(db)).find((candidate) => candidate.name === task.contender)!;
    const fresh = async () => db.collection(`c_${randomBytes(5).toString('hex')}`);
    return async () => (await (task.workload === 'rmw' ? readModifyWrite : latency)(contender, fresh, task.iterations)).p50;
  });
}

interface Level {
  readonly delay: number;
  readonly load: string;
  /** Acquire + release: p50 per round (ms), by contender. */
  readonly p50: Record<string, number[]>;
  /** Read-modify-write: p50 per round (ms), by contender. */
  readonly rmw: Record<string, number[]>;
}

async function main(): Promise<void> {
  const delays = argument('delays', '0,2,5').split(',').map(Number);
  const rounds = Number(argument('rounds', '5'));
  const iterations = Number(argument('iterations', '300'));
  const rmwIterations = Number(argument('rmw-iterations', '100'));
  const out = argument('out', join(__dirname, 'results'));
  process.env.MONGLOCK_BENCH_DIST = '1';
  const backend = await startMongoBackend(() => undefined);
  const all = await contenders();
  const peers = all.filter((c) => c.kind === 'peer' && !c.unsafe && !c.readModifyWriteOnly).map((c) => c.name);
  const names = all.filter((c) => FLOORS.includes(c.name) || RMW_OWN.includes(c.name) || peers.includes(c.name)).map((c) => c.name);
  /** Each figure: its contender's child (one library per process) and its workload. */
  const figures = [
    ...names.filter((name) => name !== RMW_OWN[2]).map((name) => ({ index: names.indexOf(name), workload: 'lock' as const })),
    ...names.filter((name) => RMW_OWN.includes(name) || peers.includes(name)).map((name) => ({ index: names.indexOf(name), workload: 'rmw' as const })),
  ];
  const pool = ChildPool.start<Task, number>(__filename, names.length);
  const levels: Level[] = [];
  try {
    for (const delay of delays) {
      const proxy = delay > 0 ? await startProxy(backend.uri, delay) : undefined;
      const client = await MongoClient.connect(proxy?.uri ?? backend.uri);
      const db = client.db(`monglock_uncontended_${randomBytes(3).toString('hex')}`);
      try {
        const p50: Record<string, number[]> = {};
        const rmw: Record<string, number[]> = {};
        const measure = (index: number, workload: Task['workload'], count: number): Promise<number> =>
          pool.runOn(index, { uri: proxy?.uri ?? backend.uri, db: db.databaseName, contender: names[index]!, iterations: count, workload });
        // Warm-up: every child loads and runs its library at once (their loading would otherwise overlap the first figures).
        await Promise.all(names.map((name, i) => measure(i, name === RMW_OWN[2] ? 'rmw' : 'lock', 100).catch(() => undefined)));
        for (const { index, workload } of figures) await measure(index, workload, workload === 'rmw' ? 20 : 100).catch(() => undefined);
        for (let round = 0; round < rounds; round++) {
          const order = figures.map((_, i) => figures[(i + round) % figures.length]!);
          for (const { index, workload } of order) {
            const values = ((workload === 'rmw' ? rmw : p50)[names[index]!] ??= []);
            try {
              values.push(await measure(index, workload, workload === 'rmw' ? rmwIterations : iterations));
            } catch (error) {
              console.error(`  ${names[index]} (${workload}) failed: ${error instanceof Error ? error.message : String(error)}`);
            }
          }
          console.log(`L = ${delay} ms: round ${round + 1}/${rounds} done, load ${loadAverage()}`);
        }
        levels.push({ delay, load: loadAverage(), p50, rmw });
        console.log(tableOf(levels.at(-1)!), rmwTableOf(levels.at(-1)!, peers));
        await db.dropDatabase();
      } finally {
        await client.close();
        proxy?.child.disconnect();
      }
    }
  } finally {
    pool.stop();
    await backend.stop();
  }
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'uncontended.json'), `${JSON.stringify({ backend: backend.description, date: new Date().toISOString(), rounds, iterations, rmwIterations, peers, levels }, null, 2)}\n`);
  writeFileSync(
    join(out, 'uncontended.md'),
    [
      '# One uncontended acquire + release, beside its floors; one read-modify-write, beside the peers',
      '',
      `Generated by \`npm run bench:uncontended\` on ${new Date().toISOString().slice(0, 10)}: ${backend.description}; ${rounds} interleaved rounds of ${iterations} calls per acquire + release figure and ${rmwIterations} per read-modify-write figure (p50 of each round; median with min–max over the rounds). monglock from the built \`dist/\`; at L = 0 no proxy, at L > 0 the majority proxy in a process of its own. "× floor": each round's p50 over the floor's median. The floor of monglock's exact commands sends the very findOneAndUpdate and updateOne monglock sends, through the bare driver: monglock's ratio to it is the library's own cost. A read-modify-write is acquire, read the document, write it, release: monglock folds it into two commands (its acquisition returns the document, its release writes it), the peers take four; "× best peer": each round's p50 over the median of the peer with the lowest median.`,
      '',
      ...levels.flatMap((level) => [tableOf(level), rmwTableOf(level, peers)]),
    ].join('\n'),
  );
  writeTargets(out);
}

/** One level's table: each contender's p50 and its ratio to each floor. */
function tableOf(level: Level): string {
  const floorMedians = FLOORS.map((name) => median(level.p50[name] ?? []));
  const lines = [
    `### L = ${level.delay} ms (load average at the end: ${level.load})`,
    '',
    `| contender | acquire + release p50, ms | ${FLOORS.map((name) => `× ${name.replace('floor: ', '')}`).join(' | ')} |`,
    `|---|---|${FLOORS.map(() => '---').join('|')}|`,
  ];
  for (const [name, values] of Object.entries(level.p50)) {
    if (values.length === 0) continue;
    const ratios = floorMedians.map((floor) => spread(values.map((value) => value / floor), 2));
    lines.push(`| ${name} | ${spread(values, 3)} | ${ratios.join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

/** One level's read-modify-write table: each contender's p50 and its ratio to the best safe peer's. */
function rmwTableOf(level: Level, peers: readonly string[]): string {
  const best = Math.min(...peers.map((name) => (level.rmw[name]?.length ? median(level.rmw[name]) : Infinity)));
  const lines = [`#### Read-modify-write, L = ${level.delay} ms`, '', '| contender | read-modify-write p50, ms | × best peer |', '|---|---|---|'];
  for (const [name, values] of Object.entries(level.rmw)) {
    if (values.length > 0) lines.push(`| ${name} | ${spread(values, 3)} | ${spread(values.map((value) => value / best), 2)} |`);
  }
  return `${lines.join('\n')}\n`;
}

if (process.argv[2] === '--child') serveLatency();
else
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
