/**
 * Randomized interleavings (issue 11): fast-check generates histories (interleaving-scenario.ts:
 * on one server or on a simulated sharded cluster, some acquisitions landing late), each is run
 * against a real MongoDB (interleaving-run.ts) and read by an independent checker
 * (history-checker.ts: the holders' spans, their guarded writes in the server's order, the stored
 * state). `npm test` runs a short, seed-logged version; `npm run stress` a long one
 * (`tsx stress/interleavings.ts --runs 150`). Reproduce a run with `MONGLOCK_SEED=<seed>`.
 */
import fc from 'fast-check';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { checkHistory, type Violation } from './history-checker';
import { guardedWritesRefused, handOversSent, runScenario } from './interleaving-run';
import { scenario, type Scenario, type ScenarioSize } from './interleaving-scenario';

/** How many histories, of what size, from which seed. */
export interface InterleavingOptions {
  readonly uri: string;
  readonly runs: number;
  readonly seed: number;
  readonly size: ScenarioSize;
  readonly log?: (line: string) => void;
}

/** What the checker read. */
export interface InterleavingReport {
  readonly seed: number;
  readonly histories: number;
  readonly operations: number;
  readonly holds: number;
  readonly outcomes: Record<string, number>;
  /** Calls that succeeded, by kind of operation (`group` for several documents at once). */
  readonly okByKind: Record<string, number>;
  readonly violations: readonly Violation[];
  /** Hand-overs sent during the histories. */
  readonly handOvers: number;
  /** Histories run on a simulated sharded cluster (routers with skewed clocks). */
  readonly sharded: number;
  /** Acquisitions made to land late: sent, applied by the server, the ones that wrote a lock, and of those the ones left to run out by their lease. */
  readonly lateLandings: { sent: number; applied: number; wrote: number; ranOut: number };
  /** Guarded writes that landed (entries of the targets' logs), which the checker read in the server's order. */
  readonly guardedWrites: number;
  /** Guarded writes that matched nothing (the holder's lock had ended by the server's clock). */
  readonly guardedRefused: number;
  /** Writes the simulated routers refused for want of the shard key (none expected). */
  readonly refusals: readonly string[];
  /** The smallest failing history fast-check found, when one failed. */
  readonly counterexample?: string;
}

/** Runs `runs` generated histories through the checker; resolves what it saw (violations included). */
export async function checkInterleavings(options: InterleavingOptions): Promise<InterleavingReport> {
  const clients = await Promise.all([0, 1, 2].map(() => MongoClient.connect(options.uri)));
  const db = clients[0]!.db(`monglock_interleavings_${options.seed}`);
  let histories = 0;
  let operations = 0;
  let holds = 0;
  const outcomes: Record<string, number> = {};
  const okByKind: Record<string, number> = {};
  let violations: Violation[] = [];
  const handOversBefore = handOversSent.count;
  const refusedBefore = guardedWritesRefused.count;
  let sharded = 0;
  let guardedWrites = 0;
  const lateLandings = { sent: 0, applied: 0, wrote: 0, ranOut: 0 };
  const refusals: string[] = [];
  try {
    const property = fc.asyncProperty(scenario(options.size), async (history: Scenario) => {
      const result = await runScenario(history, { clients, db });
      // A quarantine mark ends by the server's (a router's) clock: up to the largest router offset before its `until` by this machine's, and a few ms of timing.
      const found = checkHistory(result.events, result.final, Math.max(0, ...(history.cluster?.routers.map(Math.abs) ?? [])) + 50);
      histories++;
      operations += history.operations.length;
      holds += result.events.filter((event) => event.type === 'hold').length;
      for (const [outcome, count] of Object.entries(result.outcomes)) outcomes[outcome] = (outcomes[outcome] ?? 0) + count;
      for (const event of result.events) if (event.type === 'settled' && event.outcome === 'ok') okByKind[event.kind] = (okByKind[event.kind] ?? 0) + 1;
      if (history.cluster) sharded++;
      guardedWrites += (result.final.guardedLogs ?? []).reduce((sum, log) => sum + log.entries.length, 0);
      for (const key of ['sent', 'applied', 'wrote', 'ranOut'] as const) lateLandings[key] += result.lateLandings[key];
      refusals.push(...result.refusals);
      if (found.length > 0 && violations.length === 0) violations = found;
      if (found.length > 0) options.log?.(`history ${histories}: ${found.length} violation(s): ${found.map((v) => `${v.rule}: ${v.detail}`).join('; ')}`);
      return found.length === 0;
    });
    let counterexample: string | undefined;
    try {
      await fc.assert(property, { numRuns: options.runs, seed: options.seed, interruptAfterTimeLimit: 30 * 60_000 });
    } catch (error) {
      counterexample = error instanceof Error ? error.message : String(error);
    }
    const handOvers = handOversSent.count - handOversBefore;
    const guardedRefused = guardedWritesRefused.count - refusedBefore;
    return { seed: options.seed, histories, operations, holds, outcomes, okByKind, violations, handOvers, sharded, lateLandings, guardedWrites, guardedRefused, refusals, counterexample };
  } finally {
    await db.dropDatabase().catch(() => undefined);
    await Promise.all(clients.map((client) => client.close()));
  }
}

/** What a report counted, in one line. */
export function summaryOf(report: InterleavingReport): string {
  const late = report.lateLandings;
  return (
    `${report.histories} histories (${report.sharded} on a sharded cluster), ${report.operations} operations, ${report.holds} holds checked, ` +
    `${report.guardedWrites} guarded writes checked (${report.guardedRefused} more matched nothing), ${report.handOvers} hand-overs, ${late.sent} acquisitions landing late (${late.applied} applied, ${late.wrote} wrote a lock, ${late.ranOut} of those ran out by their lease), ` +
    `${report.refusals.length} writes refused for want of the shard key`
  );
}

/** The seed: `MONGLOCK_SEED`, else a fresh one (always printed, so any run can be repeated). */
export function seedFromEnvironment(): number {
  const given = Number(process.env.MONGLOCK_SEED);
  return Number.isSafeInteger(given) ? given : Date.now() % 2 ** 31;
}

async function main(): Promise<number> {
  const runsAt = process.argv.indexOf('--runs');
  const runs = runsAt > 0 ? Number(process.argv[runsAt + 1]) : 150;
  const seed = seedFromEnvironment();
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  try {
    const started = Date.now();
    console.error(`interleavings on ${backend.description}: ${runs} histories, seed ${seed} (repeat with MONGLOCK_SEED=${seed})`);
    const report = await checkInterleavings({ uri: backend.uri, runs, seed, size: { maxClients: 6, maxOperations: 40 }, log: (line) => console.error(line) });
    console.log(JSON.stringify({ ...report, backend: backend.description, seconds: Math.round((Date.now() - started) / 1000) }));
    console.error(`${summaryOf(report)}, ${report.violations.length} violations`);
    return report.violations.length === 0 && !report.counterexample && report.refusals.length === 0 ? 0 : 1;
  } finally {
    await backend.stop();
  }
}

if (require.main === module) {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
