/**
 * The three scenarios of `bench:scale`, each run with fresh worker processes on a fresh collection:
 * waiters per process, held locks per process, processes per collection. Each resolves one row
 * of figures (see bench/scale-report.ts for how they are printed).
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import type { Db } from 'mongodb';
import { backendWindow, sampleProcess } from './scale-host';
import { stopAllWorkers, Worker } from './scale-children';
import { windowOf, type Snapshot, type Window } from './scale-probe';

/** What every scenario runs against. */
export interface ScaleContext {
  readonly uri: string;
  readonly db: Db;
  /** The backend's process, when it runs on this machine (its CPU and memory are read from /proc). */
  readonly backendPid: number | undefined;
  /** Waiters and processes: how long after the waiters started the window opens (ms). */
  readonly settleMs: number;
  /** Waiters and processes: how long the window lasts (ms). */
  readonly measureMs: number;
  readonly log: (line: string) => void;
}

/** What every row carries. */
interface Common {
  /** Load averages (1, 5, 15 min) when the row was measured. */
  readonly load: number[];
  /** Seconds the run took, set-up and clean-up included. */
  readonly elapsedS: number;
  /** The measured process over the window. */
  readonly window: Window;
  /** The backend's CPU (% of one core) over the window and its resident memory at the end; null when it is not on this machine. */
  readonly backend: { cpuPercent: number | null; rssMb: number | null };
}

export interface WaitersRow extends Common {
  readonly scenario: 'waiters';
  readonly streams: boolean;
  readonly n: number;
  /** The longest pause between two getMores from the waiters' start to the last acquisition (ms), null without a stream. */
  readonly longestGetMoreGapWholeMs: number | null;
  readonly longestGetMoreGapMs: number | null;
  /** From the first release sent to the last acquisition (ms); null when none acquired. */
  readonly releaseToLastMs: number | null;
  readonly acquired: number;
  readonly failed: number;
  readonly errors: string[];
}

export interface HeldRow extends Common {
  readonly scenario: 'held';
  readonly n: number;
  readonly leaseMs: number;
  readonly holdMs: number;
  /** From the first `using()` to the last acquisition (ms). */
  readonly acquireMs: number;
  readonly acquired: number;
  readonly failed: number;
  readonly errors: string[];
  /** Bodies whose signal aborted (the lease was lost), from the first acquisition to the end. */
  readonly lost: number;
  readonly lostReasons: string[];
  /** `using()` calls that rejected after their body (a release that failed: the lock was lost). */
  readonly releaseFailed: number;
}

export interface ProcessesRow extends Common {
  readonly scenario: 'processes';
  readonly streams: boolean;
  readonly p: number;
  /** Each waiting process over the window (`window` is the first one's). */
  readonly waiting: Window[];
  /** The worker process over the window. */
  readonly worker: Window;
  readonly sectionsPerSecond: number;
  readonly workerFailed: number;
  readonly workerErrors: string[];
  /** Waiting processes that acquired their document once it was released. */
  readonly acquiredAfterRelease: number;
  readonly errors: string[];
}

export type ScaleRow = WaitersRow | HeldRow | ProcessesRow;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const idsOf = (prefix: string, count: number): string[] => Array.from({ length: count }, (_, i) => `${prefix}${i}`);
type WorkerSnapshot = Snapshot & { sections: number };

/** Makes a collection of its own with one document per id, starts the named workers connected to it, runs `body`, and always stops them and drops it. */
async function withRun<T>(
  ctx: ScaleContext,
  ids: readonly string[],
  workers: ReadonlyArray<{ name: string; changeStreams: boolean; locktimeout: number }>,
  body: (started: Worker[]) => Promise<T>,
): Promise<T> {
  const collection = `scale_${randomBytes(5).toString('hex')}`;
  for (let at = 0; at < ids.length; at += 1000) await ctx.db.collection(collection).insertMany(ids.slice(at, at + 1000).map((id) => ({ _id: id, value: 0 })) as never[]);
  const started = workers.map((spec) => Worker.start(spec.name));
  try {
    await Promise.all(started.map((worker, i) => worker.ask('connect', { uri: ctx.uri, db: ctx.db.databaseName, collection, changeStreams: workers[i]!.changeStreams, locktimeout: workers[i]!.locktimeout })));
    return await body(started);
  } finally {
    await stopAllWorkers(started);
    await ctx.db.dropCollection(collection).catch(() => undefined);
  }
}

/** Snapshots of the given workers and a sample of the backend, taken together. */
async function mark(ctx: ScaleContext, workers: readonly Worker[]): Promise<{ snapshots: WorkerSnapshot[]; backend: ReturnType<typeof sampleProcess> }> {
  const backend = sampleProcess(ctx.backendPid);
  const snapshots = await Promise.all(workers.map((worker) => worker.ask<WorkerSnapshot>('snapshot')));
  return { snapshots, backend };
}

/**
 * One process holds `n` documents; a second (the measured one) starts `n` waiters, one per
 * document (`acquire` with `wait` 60 s); after the settle period its commands are counted over the
 * window; then every document is released at once and the waiters' outcomes are collected.
 */
export async function waitersScenario(ctx: ScaleContext, n: number, streams: boolean): Promise<WaitersRow> {
  const begun = Date.now();
  const ids = idsOf('d', n);
  return withRun(ctx, ids, [{ name: 'holder', changeStreams: streams, locktimeout: 600_000 }, { name: 'waiter', changeStreams: streams, locktimeout: 60_000 }], async ([holder, waiter]) => {
    await holder!.ask('hold', { ids });
    const { startedAt } = await waiter!.ask<{ startedAt: number }>('wait', { ids, waitMs: 60_000 });
    await sleep(ctx.settleMs);
    const from = await mark(ctx, [waiter!]);
    await sleep(ctx.measureMs);
    const to = await mark(ctx, [waiter!]);
    const released = await holder!.ask<{ startedAt: number }>('release');
    const settled = await waiter!.ask<{ acquired: number; failed: number; errors: string[]; lastAt: number | null }>('settled', {}, 180_000);
    const window = windowOf(from.snapshots[0]!, to.snapshots[0]!);
    const lastAt = settled.acquired > 0 ? settled.lastAt : null;
    return {
      scenario: 'waiters',
      streams,
      n,
      load: loadavg(),
      elapsedS: (Date.now() - begun) / 1000,
      window,
      backend: backendWindow(from.backend, to.backend),
      longestGetMoreGapMs: await waiter!.ask<number | null>('longestGap', { from: from.snapshots[0]!.at, to: to.snapshots[0]!.at }),
      longestGetMoreGapWholeMs: await waiter!.ask<number | null>('longestGap', { from: startedAt, to: lastAt ?? to.snapshots[0]!.at }),
      releaseToLastMs: lastAt === null ? null : lastAt - released.startedAt,
      acquired: settled.acquired,
      failed: settled.failed,
      errors: settled.errors,
    };
  });
}

/** One process starts `n` `using()` bodies at a `leaseMs` lease and holds them `holdMs` from the last acquisition: the window. */
export async function heldScenario(ctx: ScaleContext, n: number, leaseMs: number, holdMs: number): Promise<HeldRow> {
  const begun = Date.now();
  const ids = idsOf('h', n);
  return withRun(ctx, ids, [{ name: 'holder', changeStreams: true, locktimeout: leaseMs }], async ([holder]) => {
    const acquired = await holder!.ask<{ startedAt: number; lastAcquiredAt: number; acquired: number; failed: number; errors: string[] }>('using', { ids }, 300_000);
    const from = await mark(ctx, [holder!]);
    await sleep(holdMs);
    const to = await mark(ctx, [holder!]);
    const ended = await holder!.ask<{ lost: number; lostReasons: string[]; releaseFailed: number }>('end', {}, 300_000);
    return {
      scenario: 'held',
      n,
      leaseMs,
      holdMs,
      load: loadavg(),
      elapsedS: (Date.now() - begun) / 1000,
      window: windowOf(from.snapshots[0]!, to.snapshots[0]!),
      backend: backendWindow(from.backend, to.backend),
      acquireMs: acquired.lastAcquiredAt - acquired.startedAt,
      acquired: acquired.acquired,
      failed: acquired.failed,
      errors: acquired.errors,
      lost: ended.lost,
      lostReasons: ended.lostReasons,
      releaseFailed: ended.releaseFailed,
    };
  });
}

/** Documents the worker of the processes scenario takes in turn, and its concurrent loops. */
export const WORKED_DOCUMENTS = 200;
const WORKER_LOOPS = 8;

/**
 * `p` processes each wait on a document of their own (held by another process) while a worker
 * process works {@link WORKED_DOCUMENTS} other documents in an acquire/release loop; over the
 * window, each waiting process's commands and stream events, and the worker's throughput. Then
 * the held documents are released: each waiting process must acquire its own.
 */
export async function processesScenario(ctx: ScaleContext, p: number, streams: boolean): Promise<ProcessesRow> {
  const begun = Date.now();
  const held = idsOf('w', p);
  const worked = idsOf('x', WORKED_DOCUMENTS);
  const specs = [
    { name: 'holder', changeStreams: streams, locktimeout: 600_000 },
    { name: 'worker', changeStreams: streams, locktimeout: 10_000 },
    ...held.map((_, i) => ({ name: `waiting-${i}`, changeStreams: streams, locktimeout: 60_000 })),
  ];
  return withRun(ctx, [...held, ...worked], specs, async ([holder, worker, ...waiting]) => {
    await holder!.ask('hold', { ids: held });
    await worker!.ask('work', { ids: worked, loops: WORKER_LOOPS });
    await Promise.all(waiting.map((process, i) => process.ask('wait', { ids: [held[i]], waitMs: 60_000 })));
    await sleep(ctx.settleMs);
    const measured = [worker!, ...waiting];
    const from = await mark(ctx, measured);
    await sleep(ctx.measureMs);
    const to = await mark(ctx, measured);
    await holder!.ask('release');
    const settled = await Promise.all(waiting.map((process) => process.ask<{ acquired: number; errors: string[] }>('settled', {}, 120_000)));
    const stopped = await worker!.ask<{ failed: number; errors: string[] }>('stopWork', {}, 120_000);
    const windows = measured.map((_, i) => windowOf(from.snapshots[i]!, to.snapshots[i]!));
    return {
      scenario: 'processes',
      streams,
      p,
      load: loadavg(),
      elapsedS: (Date.now() - begun) / 1000,
      window: windows[1]!,
      waiting: windows.slice(1),
      worker: windows[0]!,
      backend: backendWindow(from.backend, to.backend),
      sectionsPerSecond: (to.snapshots[0]!.sections - from.snapshots[0]!.sections) / windows[0]!.seconds,
      workerFailed: stopped.failed,
      workerErrors: stopped.errors,
      acquiredAfterRelease: settled.reduce((sum, outcome) => sum + outcome.acquired, 0),
      errors: settled.flatMap((outcome) => outcome.errors),
    };
  });
}
