/**
 * A job run once per interval across three processes (docs/api.md: minHold): every process
 * starts it on the same schedule; a minimum hold keeps the lock taken for most of the interval,
 * so the job runs once per tick even when the winner finishes at once and another process comes late.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';

const uri = process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017';
const INTERVAL = 1_000;
const TICKS = 4;

/** One instance of the application: on every tick it tries the job, and runs it if it won the tick. */
async function instance(name: string, firstTick: number): Promise<void> {
  const client = await MongoClient.connect(uri);
  const jobs = client.db('monglock_examples').collection<{ _id: string; ran: Array<{ tick: number; by: string }> }>('jobs');
  try {
    // #region readme
    const scheduler = writeLock({ collection: jobs, locktimeout: 30_000 });

    const runOnce = async (tick: number): Promise<void> => {
      // No wait: whoever is refused skips this tick. minHold keeps the lock taken for 800 ms after
      // the winner's acquisition, even once it released: a process starting up to 800 ms late is refused too.
      const handle = await scheduler.acquire({ _id: 'nightly-report' }, { minHold: 800 }).catch(() => undefined);
      if (!handle) return;
      try {
        await jobs.updateOne(handle.guard(), { $push: { ran: { tick, by: name } } }); // the job itself
      } finally {
        await handle.release(); // ends our hold; the entry stays until the minimum hold ends
      }
    };
    // #endregion
    for (let tick = 0; tick < TICKS; tick++) {
      const at = firstTick + tick * INTERVAL;
      if (Date.now() > at + 300) continue; // started too late for this tick
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
      await runOnce(tick);
    }
  } finally {
    await client.close();
  }
}

/** Starts three instances in processes of their own, then reads which process ran each tick. */
async function main(): Promise<void> {
  const client = await MongoClient.connect(uri);
  const jobs = client.db('monglock_examples').collection<{ _id: string; ran: Array<{ tick: number; by: string }> }>('jobs');
  await jobs.deleteMany({ _id: 'nightly-report' });
  await jobs.insertOne({ _id: 'nightly-report', ran: [] });
  try {
    const firstTick = Date.now() + 4_000; // time for the processes to start
    const run = promisify(execFile);
    await Promise.all(['a', 'b', 'c'].map((name) => run(process.execPath, [...process.execArgv, __filename, 'instance', name, String(firstTick)], { env: process.env })));
    const ran = (await jobs.findOne({ _id: 'nightly-report' }))?.ran ?? [];
    const ticks = ran.map((run) => run.tick);
    console.log(`ran ${ran.length} time(s) in ${TICKS} ticks, by ${ran.map((run) => `${run.by}@${run.tick}`).join(', ')}`);
    if (ran.length === 0 || new Set(ticks).size !== ticks.length) throw new Error('a tick ran more than once, or none ran');
  } finally {
    await client.close();
  }
}

const [role, name, firstTick] = process.argv.slice(2);
(role === 'instance' ? instance(name ?? '?', Number(firstTick)) : main()).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
