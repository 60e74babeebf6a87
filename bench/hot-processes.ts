/**
 * `npm run bench:hot`: one hot document under 16 workers, spread over processes as services run
 * them (1 × 16, 4 × 4, 16 × 1), for monglock and every peer that acquires safely (majority), at
 * L = 0, 2 and 5 ms of modelled majority wait: critical sections per second, Jain's fairness
 * index over the 16 workers, the longest wait, and lock commands per section (counted in a warm-up
 * round, which is not timed: command monitoring costs CPU). At L = 0 the driver
 * talks to the server directly; at L > 0 through the majority proxy, in a process of its own.
 * monglock runs from the built `dist/`. Rounds are interleaved (each round measures every
 * contender and layout once, in a rotated order); figures are medians with min–max. The backend's
 * CPU time per section (a server on this host: its `/proc`) tells what a library costs the server
 * beyond its commands (a change stream's events, matched per stream). Writes
 * bench/results/hot.md and hot.json (or to `--out`).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient, type Db } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { closeChangeFeed, contenders, type Contender } from './contenders';
import { argument, ChildPool, countsAsCommand, loadAverage, median, serveTasks, spread } from './harness';
import { renderHotChart } from './hot-chart';
import { listenerPid, sampleProcess } from './scale-host';
import { startProxy } from './proxy-process';
import { writeTargets } from './targets';
import { takeTurns } from './workloads';

interface Task {
  readonly uri: string;
  readonly db: string;
  readonly collection: string;
  readonly data: string;
  readonly contender: string;
  readonly workers: number;
  readonly durationMs: number;
  /** Count the commands sent (command monitoring costs CPU: only in the warm-up round). */
  readonly monitor: boolean;
}
interface Outcome {
  readonly counts: number[];
  readonly worstWait: number;
  readonly commands: number;
  readonly seconds: number;
  /** The library's error, when it failed. */
  readonly failed?: string;
}

let LAYOUTS: ReadonlyArray<readonly [processes: number, workers: number]> = [
  [1, 16],
  [4, 4],
  [16, 1],
];

/** A child: runs `workers` workers of one contender on the hot document for `durationMs`. */
function serveHot(): void {
  const clients = new Map<string, MongoClient>();
  serveTasks<Task, Outcome>(async (task) => {
    const key = `${task.uri} ${task.monitor}`;
    let client = clients.get(key);
    if (!client) clients.set(key, (client = await MongoClient.connect(task.uri, { maxPoolSize: 32, monitorCommands: task.monitor })));
    const db = client.db(task.db);
    const contender = (await contenders(db)).find((candidate) => candidate.name === task.contender)!;
    await contender.prepare(db.collection(task.collection), ['hot'], db.collection(task.data));
    return async () => {
      let commands = 0;
      const count = (event: { commandName: string; command?: { pipeline?: unknown } }): void => void (countsAsCommand(event) && commands++);
      client.on('commandStarted', count);
      let turns;
      try {
        turns = await takeTurns(contender, task.workers, task.durationMs);
      } catch (error) {
        turns = { counts: [], worstWait: 0, seconds: 0, failed: error instanceof Error ? error.message : String(error) };
      }
      client.off('commandStarted', count);
      closeChangeFeed(db.collection(task.collection)); // its linger would load the next run
      return { ...turns, commands };
    };
  });
}

interface Figure {
  contender: string;
  layout: string;
  perSecond: number[];
  fairness: number[];
  worstWait: number[];
  commandsPerSection: number[];
  /** The backend's CPU time per section, ms (a measured round; none when the server is not on this host). */
  backendMs: number[];
  /** The library's errors, in the rounds where it failed (those rounds are not counted). */
  failures: string[];
}

async function main(): Promise<void> {
  const delays = argument('delays', '0,2,5').split(',').map(Number);
  const rounds = Number(argument('rounds', '5'));
  const durationMs = Number(argument('duration', '2000'));
  const out = argument('out', join(__dirname, 'results'));
  const only = argument('only', '').split(',').filter(Boolean);
  const layouts = argument('layouts', '').split(',').filter(Boolean);
  if (layouts.length > 0) LAYOUTS = layouts.map((layout) => layout.split('x').map(Number) as [number, number]);
  process.env.MONGLOCK_BENCH_DIST = '1';
  const backend = await startMongoBackend(() => undefined);
  const pool = ChildPool.start<Task, Outcome>(__filename, 16);
  const names = (await contenders())
    .filter((c: Contender) => c.kind !== 'floor' && !c.unsafe && !c.readModifyWriteOnly && !c.name.includes('multiLock') && !c.name.includes('resourceLocks'))
    .map((c) => c.name)
    .filter((name) => only.length === 0 || only.some((part) => name.includes(part)));
  const levels: Array<{ delay: number; load: string; figures: Figure[] }> = [];
  const admin = await MongoClient.connect(backend.uri);
  const backendPid = listenerPid(backend.uri);
  try {
    for (const delay of delays) {
      const proxy = delay > 0 ? await startProxy(backend.uri, delay) : undefined;
      const uri = proxy?.uri ?? backend.uri;
      const figures = new Map<string, Figure>();
      const dbName = `monglock_hot_${randomBytes(3).toString('hex')}`;
      const db: Db = admin.db(dbName);
      try {
        // Round 0 warms up the server and the children (its figures are not kept) and counts the commands.
        for (let round = 0; round <= rounds; round++) {
          const runs = LAYOUTS.flatMap(([processes, workers]) => names.map((contender) => ({ contender, processes, workers })));
          const rotated = [...runs.slice(round % runs.length), ...runs.slice(0, round % runs.length)];
          for (const { contender, processes, workers } of rotated) {
            const suffix = randomBytes(5).toString('hex');
            const task: Task = { uri, db: dbName, collection: `l_${suffix}`, data: `d_${suffix}`, contender, workers, durationMs, monitor: round === 0 };
            const before = sampleProcess(backendPid);
            const outcomes = await pool.run(Array.from({ length: processes }, () => task));
            const after = sampleProcess(backendPid);
            const counts = outcomes.flatMap((outcome) => outcome.counts);
            const total = counts.reduce((a, b) => a + b, 0);
            const seconds = Math.max(...outcomes.map((outcome) => outcome.seconds));
            const layout = `${processes} × ${workers}`;
            const key = `${contender} ${layout}`;
            const figure = figures.get(key) ?? { contender, layout, perSecond: [], fairness: [], worstWait: [], commandsPerSection: [], backendMs: [], failures: [] };
            figures.set(key, figure);
            await db.dropCollection(task.collection).catch(() => undefined);
            await db.dropCollection(task.data).catch(() => undefined);
            const failed = outcomes.find((outcome) => outcome.failed !== undefined)?.failed;
            if (failed !== undefined) {
              figure.failures.push(failed.slice(0, 160));
              continue;
            }
            if (round === 0) {
              figure.commandsPerSection.push(outcomes.reduce((a, outcome) => a + outcome.commands, 0) / total);
              continue;
            }
            figure.perSecond.push(total / seconds);
            figure.fairness.push((total * total) / (counts.length * counts.reduce((a, b) => a + b * b, 0)));
            figure.worstWait.push(Math.max(...outcomes.map((outcome) => outcome.worstWait)));
            if (before && after) figure.backendMs.push(((after.cpuSeconds - before.cpuSeconds) * 1000) / total);
          }
          console.log(`L = ${delay} ms: ${round === 0 ? 'warm-up' : `round ${round}/${rounds}`} done, load ${loadAverage()}`);
        }
        levels.push({ delay, load: loadAverage(), figures: [...figures.values()] });
        console.log(tableOf(levels.at(-1)!));
      } finally {
        await db.dropDatabase().catch(() => undefined);
        proxy?.child.disconnect();
      }
    }
  } finally {
    await admin.close();
    pool.stop();
    await backend.stop();
  }
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'hot.json'), `${JSON.stringify({ backend: backend.description, date: new Date().toISOString(), rounds, durationMs, levels }, null, 2)}\n`);
  writeFileSync(join(out, 'hot.md'), reportOf(backend.description, rounds, durationMs, levels));
  writeFileSync(join(out, 'hot.svg'), renderHotChart(backend.description, levels));
  writeTargets(out);
}

/** One level's table: per layout, each contender's sections/s (and its ratio to the best safe peer), fairness, worst wait, commands. */
function tableOf(level: { delay: number; load: string; figures: Figure[] }): string {
  const lines = [`### L = ${level.delay} ms (load average at the end: ${level.load})`, '', '| layout | contender | sections/s | × best peer | Jain | worst wait, ms | commands/section (warm-up) | backend CPU, ms/section |', '|---|---|---|---|---|---|---|---|'];
  for (const [processes, workers] of LAYOUTS) {
    const layout = `${processes} × ${workers}`;
    const rows = level.figures.filter((figure) => figure.layout === layout);
    const peers = rows.filter((figure) => !figure.contender.startsWith('monglock'));
    const best = Math.max(...peers.filter((figure) => figure.perSecond.length > 0).map((figure) => median(figure.perSecond)));
    for (const figure of rows) {
      if (figure.perSecond.length === 0) {
        lines.push(`| ${layout} | ${figure.contender} | failed in every round: ${figure.failures[0] ?? 'no result'} | | | | | |`);
        continue;
      }
      const ratio = figure.perSecond.map((value) => value / best);
      lines.push(`| ${layout} | ${figure.contender} | ${spread(figure.perSecond)} | ${spread(ratio, 2)} | ${spread(figure.fairness, 2)} | ${spread(figure.worstWait)} | ${figure.commandsPerSection[0]?.toFixed(2) ?? '–'} | ${figure.backendMs.length > 0 ? spread(figure.backendMs, 2) : '–'} |${figure.failures.length > 0 ? ` (failed in ${figure.failures.length} round(s): ${figure.failures[0]})` : ''}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function reportOf(backend: string, rounds: number, durationMs: number, levels: Array<{ delay: number; load: string; figures: Figure[] }>): string {
  return [
    '# One hot document, 16 workers, across processes',
    '',
    `Generated by \`npm run bench:hot\` on ${new Date().toISOString().slice(0, 10)}: ${backend}; ${rounds} interleaved rounds of ${durationMs} ms per figure, median (min–max). monglock from the built \`dist/\`; at L = 0 no proxy, at L > 0 the majority proxy in a process of its own. "× best peer": against the peer with the highest median in the same layout and level (the ratios are per round, against that peer's median).`,
    '',
    ...levels.map(tableOf),
  ].join('\n');
}

if (process.argv[2] === '--child') serveHot();
else
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
