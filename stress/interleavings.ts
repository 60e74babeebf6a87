/**
 * Randomized interleavings (issue 11): fast-check generates histories (interleaving-scenario.ts),
 * each is run against a real MongoDB (interleaving-run.ts) and read by an independent checker
 * (history-checker.ts). `npm test` runs a short, seed-logged version; `npm run stress` a long one
 * (`tsx stress/interleavings.ts --runs 150`). Reproduce a run with `MONGLOCK_SEED=<seed>`.
 */
import fc from 'fast-check';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { checkHistory, type Violation } from './history-checker';
import { handOversSent, runScenario } from './interleaving-run';
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
  try {
    const property = fc.asyncProperty(scenario(options.size), async (history: Scenario) => {
      const result = await runScenario(history, { clients, db });
      const found = checkHistory(result.events, result.final);
      histories++;
      operations += history.operations.length;
      holds += result.events.filter((event) => event.type === 'hold').length;
      for (const [outcome, count] of Object.entries(result.outcomes)) outcomes[outcome] = (outcomes[outcome] ?? 0) + count;
      for (const event of result.events) if (event.type === 'settled' && event.outcome === 'ok') okByKind[event.kind] = (okByKind[event.kind] ?? 0) + 1;
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
    return { seed: options.seed, histories, operations, holds, outcomes, okByKind, violations, handOvers: handOversSent.count - handOversBefore, counterexample };
  } finally {
    await db.dropDatabase().catch(() => undefined);
    await Promise.all(clients.map((client) => client.close()));
  }
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
    console.error(`${report.histories} histories, ${report.operations} operations, ${report.holds} holds checked, ${report.handOvers} hand-overs, ${report.violations.length} violations`);
    return report.violations.length === 0 && !report.counterexample ? 0 : 1;
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
