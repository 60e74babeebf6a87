/**
 * `npm run bench:wake-up`: how long after a release in one process a waiter in another process
 * acquires. Two child processes share one document: the holder takes the lock, says so in a
 * signal document (another collection), holds it `--hold` ms (150 by default, longer than a poll)
 * and releases it, recording when the release resolved; the waiter, once the signal says the
 * holder holds, waits a third of that and calls `acquire(…, { wait })`, is refused and sleeps,
 * records when its acquisition resolved, says so, and releases at once (the holder takes the lock
 * again only after that signal, so that turns alternate). A sample
 * is the time between the two (one machine, one clock: `performance.timeOrigin + now`), paired by
 * fencing token (the waiter's is the holder's + 1). Contenders: writeLock and writeLock fair, each
 * with change streams and polling only, interleaved over `--rounds` rounds (5 by default) of
 * `--samples` samples (20). Per contender: the median and p90 of each round, given as the median
 * over rounds with min–max, and the waiter's commands per acquisition (change-stream commands not
 * counted). Writes bench/results/wake-up.md and .json (or to `--out`).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient, type Collection } from 'mongodb';
import { writeLock } from '../lib';
import { isChangeStreamCommand } from '../support/command-kinds';
import { startMongoBackend } from '../support/mongo-backend';
import { argument, ChildPool, loadAverage, median, serveTasks, spread } from './harness';

interface Task {
  readonly role: 'holder' | 'waiter';
  readonly uri: string;
  readonly db: string;
  readonly collection: string;
  /** The collection of the signal documents: `{ _id: 'held', fence }`, the holder's last acquisition; `{ _id: 'won', fence }`, the waiter's. */
  readonly signals: string;
  readonly fair: boolean;
  readonly changeStreams: boolean;
  readonly samples: number;
  readonly holdMs: number;
}
/** By fencing token: when the holder's release resolved, or when the waiter's acquisition did (absolute ms). */
interface Outcome {
  readonly at: Record<number, number>;
  readonly commands: number;
}

const CONTENDERS = [
  { name: 'writeLock', fair: false, changeStreams: true },
  { name: 'writeLock, polling', fair: false, changeStreams: false },
  { name: 'writeLock fair', fair: true, changeStreams: true },
  { name: 'writeLock fair, polling', fair: true, changeStreams: false },
] as const;

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once the signal document `id` names a fence above `fence` (read every 5 ms). */
async function until(signals: Collection<{ _id: string; fence: number }>, id: string, fence: number): Promise<void> {
  while (((await signals.findOne({ _id: id }))?.fence ?? 0) <= fence) await sleep(5);
}

/** A child: the holder or the waiter of one run. */
function serve(): void {
  serveTasks<Task, Outcome>(async (task) => {
    const client = await MongoClient.connect(task.uri, { monitorCommands: true });
    const collection = client.db(task.db).collection(task.collection);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: task.fair, changeStreams: task.changeStreams });
    const signals = client.db(task.db).collection<{ _id: string; fence: number }>(task.signals);
    let commands = 0;
    // The lock's commands (on its collection), change-stream commands not counted.
    client.on('commandStarted', (event) => void (!isChangeStreamCommand(event) && Object.values(event.command)[0] === task.collection && commands++));
    return async () => {
      const at: Record<number, number> = {};
      commands = 0;
      if (task.role === 'holder') {
        // Turns alternate: the holder takes the lock again only once the waiter had it.
        for (let sample = 0; sample < task.samples; sample++) {
          const held = await lock.acquire({ _id: 'hot' }, { wait: 30_000 });
          await signals.updateOne({ _id: 'held' }, { $set: { fence: held.fence } }, { upsert: true });
          await sleep(task.holdMs);
          await held.release();
          at[held.fence] = now();
          await until(signals, 'won', held.fence);
        }
      } else {
        let last = 0;
        for (let sample = 0; sample < task.samples; sample++) {
          // Once the holder holds it again (a polling holder may take a while), a third of its hold later: refused, then asleep.
          await until(signals, 'held', last);
          await sleep(task.holdMs / 3);
          const won = await lock.acquire({ _id: 'hot' }, { wait: 30_000 });
          at[won.fence] = now();
          last = won.fence;
          await signals.updateOne({ _id: 'won' }, { $set: { fence: won.fence } }, { upsert: true });
          await won.release();
        }
      }
      await client.close();
      return { at, commands };
    };
  });
}

/** ms from each holder release to the waiter's acquisition of the next token. */
function delays(holder: Outcome, waiter: Outcome): number[] {
  return Object.entries(waiter.at)
    .map(([fence, acquired]) => [holder.at[Number(fence) - 1], acquired] as const)
    .filter((pair): pair is readonly [number, number] => pair[0] !== undefined)
    .map(([released, acquired]) => acquired - released);
}

const percentile = (values: readonly number[], p: number): number => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;

async function main(): Promise<void> {
  const rounds = Number(argument('rounds', '5'));
  const samples = Number(argument('samples', '20'));
  const holdMs = Number(argument('hold', '150'));
  const out = argument('out', join(__dirname, 'results'));
  const backend = await startMongoBackend(() => undefined);
  const pool = ChildPool.start<Task, Outcome>(__filename, 2);
  const figures = new Map<string, { medians: number[]; p90s: number[]; commands: number[]; samples: number }>();
  const admin = await MongoClient.connect(backend.uri);
  const dbName = `monglock_wake_${randomBytes(3).toString('hex')}`;
  try {
    for (let round = 0; round < rounds; round++) {
      const rotated = [...CONTENDERS.slice(round % CONTENDERS.length), ...CONTENDERS.slice(0, round % CONTENDERS.length)];
      for (const contender of rotated) {
        const collection = `w_${randomBytes(5).toString('hex')}`;
        await admin.db(dbName).collection(collection).insertOne({ _id: 'hot' } as never);
        const base = { uri: backend.uri, db: dbName, collection, signals: `${collection}_signals`, fair: contender.fair, changeStreams: contender.changeStreams, samples, holdMs };
        const [holder, waiter] = await pool.run([
          { ...base, role: 'holder' },
          { ...base, role: 'waiter' },
        ]);
        const measured = delays(holder!, waiter!);
        const figure = figures.get(contender.name) ?? { medians: [], p90s: [], commands: [], samples: 0 };
        figures.set(contender.name, figure);
        if (measured.length > 0) {
          figure.medians.push(median(measured));
          figure.p90s.push(percentile(measured, 0.9));
        }
        figure.samples += measured.length;
        figure.commands.push(waiter!.commands / samples);
        await admin.db(dbName).dropCollection(collection).catch(() => undefined);
        await admin.db(dbName).dropCollection(base.signals).catch(() => undefined);
      }
      console.error(`round ${round + 1}/${rounds} done, load ${loadAverage()}`);
    }
  } finally {
    await admin.db(dbName).dropDatabase().catch(() => undefined);
    await admin.close();
    pool.stop();
    await backend.stop();
  }
  const rows = CONTENDERS.map(({ name }) => {
    const figure = figures.get(name)!;
    return `| monglock ${name} | ${spread(figure.medians, 1)} | ${spread(figure.p90s, 1)} | ${spread(figure.commands, 2)} | ${figure.samples} |`;
  });
  const table = [
    '# A waiter in another process: from the release to its acquisition',
    '',
    `Generated by \`npm run bench:wake-up\` on ${new Date().toISOString().slice(0, 10)}: ${backend.description}; ${rounds} interleaved rounds of ${samples} samples per contender, the holder holding ${holdMs} ms; load average at the end: ${loadAverage()}. Per round the median and p90 of the samples; here the median over the rounds (min–max). Commands: the waiter's per sample (change-stream commands not counted).`,
    '',
    '| contender | median, ms | p90, ms | waiter commands/sample | samples |',
    '|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
  console.log(table);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'wake-up.md'), table);
  writeFileSync(join(out, 'wake-up.json'), JSON.stringify({ backend: backend.description, rounds, samples, holdMs, figures: Object.fromEntries(figures) }, null, 2));
}

if (process.argv.includes('--child')) serve();
else
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
