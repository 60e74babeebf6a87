/**
 * `npm run stress`: mutual exclusion under load. Several OS processes (each with its own driver
 * client and several workers) contend on a few targets of each lock kind (writeLock, a cooperative
 * multiLock tag, resource locks, fair writeLock, folded writeLock sections, a semaphore, reentrant
 * writeLock holds, read locks upgraded to write, election terms, run-once jobs with minHold,
 * sections that quarantine their document for a while); half the processes (the even ones) have their
 * waiters woken by change streams as well, the others only poll; an
 * independent checker reads every process's append-only log and the counters and verifies: never
 * two holders at once, fencing tokens strictly increasing per target, no lost update, and never
 * more than the limit of a semaphore's permits held at once, run-once jobs stamped at least their
 * minimum hold apart, and no section entered while its document was quarantined. Full mode runs until at least
 * 100,000 critical sections; `--small` runs a few seconds (part of `npm test`). Exits non-zero on
 * any violation.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import type { SectionRecord, WorkerSettings } from './worker';

/** The limit of the semaphore documents (`s0`, `s1`, …). */
const SEMAPHORE_LIMIT = 3;

const small = process.argv.includes('--small');
const settings = small
  ? { processes: 3, workers: 4, targets: 2, batchMs: 6_000, minSections: 0, maxBatches: 1 }
  : { processes: 4, workers: 8, targets: 3, batchMs: 60_000, minSections: 100_000, maxBatches: 10 };

/** What the checker found. */
export interface StressReport {
  readonly backend: string;
  readonly processes: number;
  readonly workersPerProcess: number;
  readonly sections: number;
  readonly byKind: Record<string, number>;
  /** Releases that handed the lock to a waiter of their process in one write. */
  readonly handOvers: number;
  readonly overlaps: number;
  readonly fenceRegressions: number;
  readonly rejectedWrites: number;
  readonly lostUpdates: number;
  /** Instants at which a semaphore's holders held more permits than its limit. */
  readonly permitsOverLimit: number;
  /** Run-once sections stamped less than their minimum hold after the one before on their target. */
  readonly minHoldBroken: number;
  /** Sections that started on a quarantined target after its mark landed and before its end. */
  readonly quarantineBroken: number;
  /** The most permits of one semaphore held at once. */
  readonly mostPermits: number;
  readonly seconds: number;
}

async function runBatch(uri: string, db: string, dir: string, batch: number): Promise<string[]> {
  const logs: string[] = [];
  await Promise.all(
    Array.from({ length: settings.processes }, (_, p) => {
      const log = join(dir, `batch${batch}-process${p}.jsonl`);
      logs.push(log);
      const worker: WorkerSettings = { uri, db, workers: settings.workers, durationMs: settings.batchMs, targets: settings.targets, semaphoreLimit: SEMAPHORE_LIMIT, log, changeStreams: p % 2 === 0 };
      const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'worker.ts'), JSON.stringify(worker)], { stdio: ['ignore', 'inherit', 'inherit'] });
      return new Promise<void>((resolve, reject) => child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`worker process ${p} exited with ${code}`)))));
    }),
  );
  return logs;
}

/** Hand-overs the workers counted (their last log line). */
let handOvers = 0;

function readLog(file: string): SectionRecord[] {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as SectionRecord | { handOvers: number }).filter((line): line is SectionRecord => {
      if ('handOvers' in line) handOvers += line.handOvers;
      return 'target' in line;
    });
  } catch {
    return [];
  }
}

async function main(): Promise<number> {
  const started = Date.now();
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  const client = await MongoClient.connect(backend.uri);
  const dbName = `monglock_stress_${Date.now()}`;
  const dir = mkdtempSync(join(tmpdir(), 'monglock-stress-'));
  try {
    const db = client.db(dbName);
    const targets = [...['w', 'm', 'r', 'q', 'f', 's', 'o', 'c', 'e', 'j', 'x'].flatMap((kind) => Array.from({ length: settings.targets }, (_, i) => `${kind}${i}`)), 'h0'];
    await db.collection('counters').insertMany(targets.filter((t) => !t.startsWith('f') && !t.startsWith('s')).map((target) => ({ _id: target as never, value: 0, lastFence: 0 })));
    // Folded sections keep their counter in the locked document itself; an election's document is created by its first campaign.
    await db.collection('documents').insertMany(targets.filter((t) => !t.startsWith('r') && !t.startsWith('e')).map((target) => ({ _id: target as never, ...(target.startsWith('f') ? { value: 0 } : {}) })));
    console.error(`stress on ${backend.description}: ${settings.processes} processes x ${settings.workers} workers (${Math.ceil(settings.processes / 2)} of them with change streams), ${targets.length} targets`);

    const records: SectionRecord[] = [];
    for (let batch = 0; batch < settings.maxBatches; batch++) {
      for (const log of await runBatch(backend.uri, dbName, dir, batch)) records.push(...readLog(log));
      console.error(`  ${records.length} critical sections so far`);
      if (records.length >= settings.minSections) break;
    }

    let overlaps = 0;
    let fenceRegressions = 0;
    const byTarget = new Map<string, SectionRecord[]>();
    for (const record of records) byTarget.set(record.target, [...(byTarget.get(record.target) ?? []), record]);
    const { over: permitsOverLimit, most: mostPermits } = permitsAtOnce(records.filter((r) => r.permits !== undefined));
    for (const [target, list] of byTarget) {
      if (target.startsWith('s')) continue; // a semaphore's holders overlap: checked by their permits
      list.sort((a, b) => a.enter - b.enter);
      for (let i = 1; i < list.length; i++) {
        if (list[i]!.enter < list[i - 1]!.exit) overlaps++;
        if (list[i]!.fence <= list[i - 1]!.fence) fenceRegressions++;
      }
    }
    const { minHoldBroken, quarantineBroken } = heldApart(byTarget);
    let lostUpdates = 0;
    const folded = await db.collection('documents').find({ _id: { $in: targets.filter((t) => t.startsWith('f')) } as never }).toArray();
    for (const counter of [...(await db.collection('counters').find().toArray()), ...folded]) {
      const done = (byTarget.get(String(counter._id)) ?? []).filter((r) => r.written).length;
      lostUpdates += Math.abs(done - (counter.value as number));
    }
    const report: StressReport = {
      backend: backend.description,
      processes: settings.processes,
      workersPerProcess: settings.workers,
      sections: records.length,
      byKind: {
        writeLock: records.filter((r) => r.target.startsWith('w')).length,
        'multiLock cooperative tag': records.filter((r) => r.target.startsWith('m')).length,
        resourceLocks: records.filter((r) => r.target.startsWith('r')).length,
        'writeLock fair': records.filter((r) => r.target.startsWith('q')).length,
        'writeLock folded': records.filter((r) => r.target.startsWith('f')).length,
        semaphore: records.filter((r) => r.target.startsWith('s')).length,
        'writeLock reentrant': records.filter((r) => r.target.startsWith('o')).length,
        'multiLock upgraded': records.filter((r) => r.target.startsWith('c')).length,
        'election terms': records.filter((r) => r.target.startsWith('e')).length,
        'run-once jobs (minHold)': records.filter((r) => r.target.startsWith('j')).length,
        'writeLock, some quarantined': records.filter((r) => r.target.startsWith('x')).length,
        'writeLock hot, every worker': records.filter((r) => r.target.startsWith('h')).length,
      },
      handOvers,
      permitsOverLimit,
      mostPermits,
      minHoldBroken,
      quarantineBroken,
      overlaps,
      fenceRegressions,
      rejectedWrites: records.filter((r) => !r.written).length,
      lostUpdates,
      seconds: Math.round((Date.now() - started) / 1000),
    };
    console.log(JSON.stringify(report));
    const violations = overlaps + fenceRegressions + report.rejectedWrites + lostUpdates + permitsOverLimit + minHoldBroken + quarantineBroken;
    console.error(`${report.sections} critical sections (${JSON.stringify(report.byKind)}), ${violations} violations, ${report.seconds} s`);
    return violations === 0 && records.length > 0 ? 0 : 1;
  } finally {
    await client.db(dbName).dropDatabase().catch(() => undefined);
    await client.close();
    await backend.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Run-once sections: on a target, each one stamped at least its predecessor's minimum hold after it
 * (server ms). Quarantined targets: no section enters after a mark landed and before its end
 * (less a few ms: one machine, one clock, the server's `$$NOW` beside this process's).
 */
function heldApart(byTarget: ReadonlyMap<string, SectionRecord[]>): { minHoldBroken: number; quarantineBroken: number } {
  let minHoldBroken = 0;
  let quarantineBroken = 0;
  for (const [target, list] of byTarget) {
    if (target.startsWith('j')) {
      const stamped = [...list].sort((a, b) => a.stamp! - b.stamp!);
      for (let i = 1; i < stamped.length; i++) if (stamped[i]!.stamp! - stamped[i - 1]!.stamp! < stamped[i - 1]!.minHold!) minHoldBroken++;
    }
    for (const { quarantined } of list) {
      if (quarantined) quarantineBroken += list.filter((section) => section.enter > quarantined.landedBy && section.enter < quarantined.until - 5).length;
    }
  }
  return { minHoldBroken, quarantineBroken };
}

/** Sweeps the semaphore sections of each target: instants where the permits held exceed the limit, and the most held at once. */
function permitsAtOnce(sections: readonly SectionRecord[]): { over: number; most: number } {
  let over = 0;
  let most = 0;
  const byTarget = new Map<string, SectionRecord[]>();
  for (const section of sections) byTarget.set(section.target, [...(byTarget.get(section.target) ?? []), section]);
  for (const list of byTarget.values()) {
    // Exits before entries at the same instant: a section that ends as another begins does not overlap it.
    const events = list.flatMap((s) => [{ at: s.enter, delta: s.permits! }, { at: s.exit, delta: -s.permits! }]).sort((a, b) => a.at - b.at || a.delta - b.delta);
    let held = 0;
    for (const event of events) {
      held += event.delta;
      most = Math.max(most, held);
      if (held > SEMAPHORE_LIMIT) over++;
    }
  }
  return { over, most };
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
