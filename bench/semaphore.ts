/**
 * `npm run bench:semaphore`: one hot document, 16 workers, at most 4 holders at once, each holding
 * for 2 ms. Contenders: monglock's `semaphore({ limit: 4 })`, a multiLock tag with `limits`, and
 * the in-house baseline, resource locks' `slock` with `maxConcurrent` 4 (none of the MongoDB lock
 * libraries on npm offers a counting semaphore). Run in one process (16 workers) and across 4
 * processes (4 workers each), alternating contenders, `--rounds` times (default 3): the median and
 * the min–max of sections per second, the most holders seen at once (by the one machine's clock,
 * from every section's interval) and the MongoDB commands per section (driver command monitoring).
 * Writes bench/results/semaphore.md and .json (with `--small`: .cache/bench-semaphore/, 1 round).
 * Usage: semaphore.ts [--small] [--rounds N] [--out DIR]
 */
import { fork } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { multiLock, resourceLocks, semaphore } from '../lib';
import { startMongoBackend } from '../support/mongo-backend';
import { countsAsCommand, median } from './harness';

const LIMIT = 4;
const HOLD_MS = 2;
const CONTENDERS = ['monglock semaphore', 'monglock multiLock tag with limits', 'monglock resourceLocks slock (baseline)'] as const;
type ContenderName = (typeof CONTENDERS)[number];

interface ChildTask {
  readonly uri: string;
  readonly db: string;
  readonly contender: ContenderName;
  readonly workers: number;
  readonly durationMs: number;
}

interface ChildResult {
  readonly sections: Array<[number, number]>;
  readonly commands: number;
}

/** One process's share: `workers` workers locking the hot document for `durationMs`. */
async function runChild(task: ChildTask): Promise<ChildResult> {
  const client = await MongoClient.connect(task.uri, { monitorCommands: true, maxPoolSize: task.workers * 2 });
  let commands = 0;
  client.on('commandStarted', (event) => {
    if (countsAsCommand(event)) commands++;
  });
  const collection = client.db(task.db).collection(task.contender.replace(/\W+/g, '_'));
  const acquire = contenderLock(task.contender, collection);
  const sections: Array<[number, number]> = [];
  const deadline = performance.now() + task.durationMs;
  await Promise.all(
    Array.from({ length: task.workers }, async () => {
      while (performance.now() < deadline) {
        const release = await acquire();
        const enter = performance.timeOrigin + performance.now();
        await new Promise((done) => setTimeout(done, HOLD_MS));
        sections.push([enter, performance.timeOrigin + performance.now()]);
        await release();
      }
    }),
  );
  await client.close();
  return { sections, commands };
}

/** Acquires one holder of the hot document; resolves its release. */
function contenderLock(name: ContenderName, collection: ReturnType<ReturnType<MongoClient['db']>['collection']>): () => Promise<() => Promise<unknown>> {
  const wait = 600_000;
  if (name === 'monglock semaphore') {
    const pool = semaphore({ collection, limit: LIMIT, locktimeout: 30_000 });
    return async () => {
      const held = await pool.acquire({ _id: 'hot' }, { wait });
      return () => held.release();
    };
  }
  if (name === 'monglock multiLock tag with limits') {
    const tagged = multiLock({ collection, locktimeouts: { editor: 30_000 }, limits: { editor: LIMIT } });
    return async () => {
      const held = await tagged.acquire({ _id: 'hot' }, { tag: 'editor', wait });
      return () => held.release();
    };
  }
  const locks = resourceLocks({ collection });
  let next = 0;
  return async () => {
    const held = await locks.slock('hot', `${process.pid}-${next++}`, { ttl: 30_000, wait }, LIMIT);
    return () => held.release();
  };
}

/** Runs `task` split over `processes` child processes; sections per second, the most holders at once, commands per section. */
async function measure(task: Omit<ChildTask, 'workers'>, processes: number, workers: number): Promise<{ perSecond: number; mostAtOnce: number; commandsPerSection: number }> {
  const results = await Promise.all(
    Array.from({ length: processes }, () => {
      const child = fork(__filename, ['--child', JSON.stringify({ ...task, workers: workers / processes })], { execArgv: ['--import', 'tsx'] });
      return new Promise<ChildResult>((resolve, reject) => {
        child.once('message', (message) => resolve(message as ChildResult));
        child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`child exited with ${code}`))));
      });
    }),
  );
  const sections = results.flatMap((result) => result.sections);
  const events = sections.flatMap(([enter, exit]) => [{ at: enter, delta: 1 }, { at: exit, delta: -1 }]).sort((a, b) => a.at - b.at || a.delta - b.delta);
  let held = 0;
  let mostAtOnce = 0;
  for (const event of events) mostAtOnce = Math.max(mostAtOnce, (held += event.delta));
  const commands = results.reduce((sum, result) => sum + result.commands, 0);
  return { perSecond: sections.length / (task.durationMs / 1000), mostAtOnce, commandsPerSection: commands / Math.max(1, sections.length) };
}

async function main(): Promise<void> {
  const small = process.argv.includes('--small');
  const flag = (name: string): string | undefined => process.argv[process.argv.indexOf(name) + 1];
  const rounds = small ? 1 : process.argv.includes('--rounds') ? Number(flag('--rounds')) : 3;
  const out = process.argv.includes('--out') ? flag('--out')! : small ? join('.cache', 'bench-semaphore') : join('bench', 'results');
  const durationMs = small ? 400 : 3_000;
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  const client = await MongoClient.connect(backend.uri);
  const db = `monglock_bench_semaphore_${Date.now()}`;
  try {
    await Promise.all(CONTENDERS.map((name) => client.db(db).collection(name.replace(/\W+/g, '_')).insertOne({ _id: 'hot' as never })));
    const rows: Array<{ contender: ContenderName; processes: number; perSecond: number[]; mostAtOnce: number; commandsPerSection: number[] }> = [];
    for (const processes of [1, 4]) {
      for (const contender of CONTENDERS) rows.push({ contender, processes, perSecond: [], mostAtOnce: 0, commandsPerSection: [] });
      for (let round = 0; round < rounds; round++) {
        for (const contender of round % 2 === 0 ? CONTENDERS : [...CONTENDERS].reverse()) {
          const result = await measure({ uri: backend.uri, db, contender, durationMs }, processes, 16);
          const row = rows.find((r) => r.contender === contender && r.processes === processes)!;
          row.perSecond.push(result.perSecond);
          row.mostAtOnce = Math.max(row.mostAtOnce, result.mostAtOnce);
          row.commandsPerSection.push(result.commandsPerSection);
          console.error(`  ${contender}, ${processes} process(es): ${result.perSecond.toFixed(0)}/s, at most ${result.mostAtOnce} at once, ${result.commandsPerSection.toFixed(2)} commands/section`);
        }
      }
    }
    const table = [
      `Semaphore, hot document, 16 workers, limit ${LIMIT}, ${HOLD_MS} ms per section, ${rounds} round(s) of ${durationMs / 1000} s on ${backend.description}:`,
      '',
      '| contender | processes × workers | sections/s, median (min–max) | most holders at once | commands per section |',
      '|---|---|---|---|---|',
      ...rows.map(
        (row) =>
          `| ${row.contender} | ${row.processes} × ${16 / row.processes} | ${median(row.perSecond).toFixed(0)} (${Math.min(...row.perSecond).toFixed(0)}–${Math.max(...row.perSecond).toFixed(0)}) | ${row.mostAtOnce} | ${median(row.commandsPerSection).toFixed(2)} |`,
      ),
    ].join('\n');
    console.log(table);
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'semaphore.md'), `${table}\n`);
    writeFileSync(join(out, 'semaphore.json'), `${JSON.stringify({ backend: backend.description, limit: LIMIT, holdMs: HOLD_MS, rounds, durationMs, rows }, null, 2)}\n`);
  } finally {
    await client.db(db).dropDatabase().catch(() => undefined);
    await client.close();
    await backend.stop();
  }
}

if (process.argv[2] === '--child') {
  runChild(JSON.parse(process.argv[3]!) as ChildTask).then(
    (result) => process.send!(result, () => process.exit(0)),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
