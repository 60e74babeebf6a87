import type { Collection, Document, MongoClient } from 'mongodb';
import { insertDocs, type Contender } from './contenders';
import { countsAsCommand } from './harness';

/** Latency of one uncontended acquire + release, in ms. */
export interface Latency {
  readonly p50: number;
  readonly p99: number;
}

/** One hot resource under `workers` concurrent workers. */
export interface Hot {
  /** Completed critical sections per second. */
  readonly perSecond: number;
  /** Jain's fairness index of the workers' completions: 1 = all equal, 1/n = one worker got all. */
  readonly fairness: number;
}

/** MongoDB commands a library sends (driver command monitoring). */
export interface Commands {
  readonly acquire: number;
  readonly release: number;
  readonly refused: number | null;
  /** Writes the majority proxy held (majority waits) for one acquire + release. */
  readonly majorityWrites?: number;
}

export type NewCollection = () => Promise<Collection<Document>>;

/** Prepares `contender` on a fresh lock collection and a fresh data collection holding `resources`. */
async function prepared(contender: Contender, fresh: NewCollection, resources: readonly string[]): Promise<void> {
  const data = await fresh();
  await insertDocs(data, resources);
  await contender.prepare(await fresh(), resources, data);
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/** (1) Uncontended acquire + release of one resource, `iterations` times after a warm-up. */
export async function latency(contender: Contender, fresh: NewCollection, iterations: number): Promise<Latency> {
  await prepared(contender, fresh, ['r']);
  for (let i = 0; i < Math.min(50, iterations); i++) await (await contender.lock('r'))();
  const times: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    const release = await contender.lock('r');
    await release();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { p50: quantile(times, 0.5), p99: quantile(times, 0.99) };
}

/** (2) `workers` workers taking turns on one hot resource for `durationMs`. */
export async function hot(contender: Contender, fresh: NewCollection, workers: number, durationMs: number): Promise<Hot & { worstWait: number }> {
  await prepared(contender, fresh, ['hot']);
  const { counts, worstWait, seconds } = await takeTurns(contender, workers, durationMs);
  const total = counts.reduce((a, b) => a + b, 0);
  const squares = counts.reduce((a, b) => a + b * b, 0);
  return { perSecond: total / seconds, fairness: squares === 0 ? 0 : (total * total) / (workers * squares), worstWait };
}

/** `workers` workers of `contender` taking turns on the prepared resource `hot` for `durationMs`: sections per worker, the longest wait (ms), the time taken (s). */
export async function takeTurns(contender: Pick<Contender, 'lock'>, workers: number, durationMs: number): Promise<{ counts: number[]; worstWait: number; seconds: number }> {
  const counts = new Array<number>(workers).fill(0);
  let running = true;
  let worstWait = 0;
  let failure: unknown;
  const start = performance.now();
  const timer = setTimeout(() => (running = false), durationMs);
  await Promise.all(
    counts.map(async (_, worker) => {
      while (running) {
        const asked = performance.now();
        try {
          const release = await contender.lock('hot');
          worstWait = Math.max(worstWait, performance.now() - asked);
          counts[worker]!++;
          await release();
        } catch (error) {
          // A library that fails stops every worker (once all have stopped, the failure is thrown).
          failure ??= error;
          running = false;
        }
      }
    }),
  );
  clearTimeout(timer);
  if (failure !== undefined) throw failure;
  return { counts, worstWait, seconds: (performance.now() - start) / 1000 };
}

/** (3) Acquire + release of `resources` different resources by `workers` workers; per second. */
export async function manyResources(contender: Contender, fresh: NewCollection, resources: number, workers: number): Promise<number> {
  const names = Array.from({ length: resources }, (_, i) => `r${i}`);
  await prepared(contender, fresh, names);
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (next < names.length) {
        const release = await contender.lock(names[next++]!);
        await release();
      }
    }),
  );
  return resources / ((performance.now() - start) / 1000);
}

/** (4) Commands per uncontended acquire, per release and per refused acquire. */
export async function commands(contender: Contender, fresh: NewCollection, client: MongoClient, majorityWrites: () => number = () => 0): Promise<Commands> {
  await prepared(contender, fresh, ['c']);
  await (await contender.lock('c'))();
  let sent = 0;
  const count = (event: { commandName: string }): void => {
    if (countsAsCommand(event)) sent++;
  };
  client.on('commandStarted', count);
  try {
    const measure = async (step: () => Promise<unknown>): Promise<{ n: number; majority: number; result: unknown }> => {
      const before = sent;
      const majorityBefore = majorityWrites();
      const result = await step();
      return { n: sent - before, majority: majorityWrites() - majorityBefore, result };
    };
    const acquired = await measure(() => contender.tryLock('c'));
    const held = acquired.result as (() => Promise<void>) | null;
    const refused = contender.kind === 'floor' ? null : (await measure(() => contender.tryLock('c'))).n;
    const released = await measure(() => held!());
    return { acquire: acquired.n, release: released.n, refused, majorityWrites: acquired.majority + released.majority };
  } finally {
    client.off('commandStarted', count);
  }
}

/** (5) One uncontended read-modify-write critical section (read the resource's document, write it), `iterations` times. */
export async function readModifyWrite(contender: Contender, fresh: NewCollection, iterations: number): Promise<Latency> {
  const run = contender.readModifyWrite?.bind(contender);
  if (!run) throw new Error('no read-modify-write');
  await prepared(contender, fresh, ['rmw']);
  for (let i = 0; i < Math.min(20, iterations); i++) await run('rmw');
  const times: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await run('rmw');
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { p50: quantile(times, 0.5), p99: quantile(times, 0.99) };
}
