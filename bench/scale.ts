/**
 * `npm run bench:scale`: how a process's load grows with the crowd, on one backend. Three
 * scenarios (bench/scale-scenarios.ts), each in worker processes of its own that count their
 * commands by driver command monitoring:
 * - waiters per process: N waiters on N held documents (N = 100, 200, 1,000, 5,000), streams on and off;
 * - held locks per process: N `using()` bodies (N = 100, 1,000, 3,000, 10,000) at 2 s and 10 s leases;
 * - processes per collection: P = 1, 4, 8 waiting processes beside a worker, streams on and off.
 * Writes bench/results/scale.md and scale.json (`--out`, `--name`) and prints the tables.
 *
 * Flags: `--quick` (the small subset the test suite runs: 100 waiters with streams on and off, 300
 * locks held 6 s at a 10 s lease, 2 waiting processes with streams on; a window of 2 s), `--only waiters,held,processes`,
 * `--sizes 100,200` (N or P of the scenarios run), `--leases 2,10` (s), `--hold 20` (s),
 * `--streams on,off`, `--settle 3` (s), `--measure 5` (s), `--out <dir>`, `--name scale`,
 * `--label <text>` (put in the report's title); `--from <file>.json` writes `<file>.md` again from
 * a run's results, running nothing. An unknown flag is refused (exit 2).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { startMongoBackend, type MongoBackend } from '../support/mongo-backend';
import { killAllWorkers } from './scale-children';
import { listenerPid } from './scale-host';
import { renderScale, type ScaleResults } from './scale-report';
import { heldScenario, processesScenario, waitersScenario, type ScaleContext, type ScaleRow } from './scale-scenarios';

const SCENARIOS = ['waiters', 'held', 'processes'] as const;
type Scenario = (typeof SCENARIOS)[number];

/** Flags taking a value, and flags without one. */
const VALUED = new Set(['from', 'only', 'sizes', 'leases', 'hold', 'streams', 'settle', 'measure', 'out', 'name', 'label']);
const BARE = new Set(['quick']);

/** The run's settings, read from the command line (full run, or `--quick`), each default overridable by its flag. */
function readFlags(argv: readonly string[]): {
  quick: boolean;
  only: Scenario[];
  sizes: Partial<Record<Scenario, number[]>>;
  leasesMs: number[];
  holdMs: number;
  /** Streams on (true) and off for the waiters and for the processes scenarios. */
  streams: { waiters: boolean[]; processes: boolean[] };
  settleMs: number;
  measureMs: number;
  out: string;
  name: string;
  label: string;
  /** Re-render the markdown of this results file, without running anything. */
  from: string | undefined;
} {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const flag = /^--([a-z]+)$/.exec(argv[i]!)?.[1];
    if (flag !== undefined && BARE.has(flag)) values.set(flag, 'true');
    else if (flag !== undefined && VALUED.has(flag) && argv[i + 1] !== undefined) values.set(flag, argv[++i]!);
    else throw new UsageError(`unknown or incomplete argument ${JSON.stringify(argv[i])}: flags are --quick, ${[...VALUED].map((name) => `--${name} <value>`).join(', ')}`);
  }
  const list = (name: string): string[] | undefined => values.get(name)?.split(',').filter(Boolean);
  const numbers = (name: string): number[] | undefined => list(name)?.map((value) => positive(name, value));
  const quick = values.has('quick');
  const only = (list('only') ?? [...SCENARIOS]).map((name) => {
    if (!(SCENARIOS as readonly string[]).includes(name)) throw new UsageError(`--only takes ${SCENARIOS.join(', ')}, got ${JSON.stringify(name)}`);
    return name as Scenario;
  });
  const given = numbers('sizes');
  const defaults: Record<Scenario, number[]> = quick ? { waiters: [100], held: [300], processes: [2] } : { waiters: [100, 200, 1000, 5000], held: [100, 1000, 3000, 10000], processes: [1, 4, 8] };
  const modes = (values: readonly string[]): boolean[] =>
    values.map((value) => {
      if (value !== 'on' && value !== 'off') throw new UsageError(`--streams takes on, off, got ${JSON.stringify(value)}`);
      return value === 'on';
    });
  const streams = list('streams');
  return {
    quick,
    only,
    sizes: Object.fromEntries(only.map((scenario) => [scenario, given ?? defaults[scenario]])),
    leasesMs: (numbers('leases') ?? (quick ? [10] : [2, 10])).map((s) => s * 1000),
    holdMs: (numbers('hold')?.[0] ?? (quick ? 6 : 20)) * 1000,
    // The quick run measures the processes with streams only (the test suite's time).
    streams: { waiters: modes(streams ?? ['on', 'off']), processes: modes(streams ?? (quick ? ['on'] : ['on', 'off'])) },
    settleMs: (numbers('settle')?.[0] ?? (quick ? 1 : 3)) * 1000,
    measureMs: (numbers('measure')?.[0] ?? (quick ? 2 : 5)) * 1000,
    out: values.get('out') ?? join(__dirname, 'results'),
    name: values.get('name') ?? 'scale',
    label: values.get('label') ?? '',
    from: values.get('from'),
  };
}

class UsageError extends Error {}

function positive(name: string, value: string): number {
  const number = Number(value);
  if (!Number.isFinite(number) || number <= 0) throw new UsageError(`--${name} takes positive numbers, got ${JSON.stringify(value)}`);
  return number;
}

/** The commit measured (HEAD, and the last commit that changed lib/), marked when lib/ has changes not committed. */
function commitOf(): string {
  const git = (...args: string[]): string => execFileSync('git', args, { encoding: 'utf8', cwd: __dirname }).trim();
  try {
    const dirty = git('status', '--porcelain', '--', '../lib') ? ', with uncommitted changes to lib/' : '';
    return `${git('rev-parse', '--short', 'HEAD')} (lib/ as of ${git('log', '-1', '--format=%h', '--', '../lib')}${dirty})`;
  } catch {
    return 'an unknown commit';
  }
}

async function main(): Promise<void> {
  const flags = readFlags(process.argv.slice(2));
  if (flags.from !== undefined) {
    writeFileSync(flags.from.replace(/\.json$/, '.md'), renderScale(JSON.parse(readFileSync(flags.from, 'utf8')) as ScaleResults));
    return;
  }
  const backend: MongoBackend = await startMongoBackend((line) => console.error(line));
  const stopEverything = (): void => {
    killAllWorkers();
    void backend.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', stopEverything);
  process.once('SIGTERM', stopEverything);
  const admin = new MongoClient(backend.uri);
  const rows: ScaleRow[] = [];
  const dbName = `monglock_scale_${process.pid}`;
  try {
    const backendPid = listenerPid(backend.uri);
    const log = (line: string): void => console.error(`${line} (load ${loadavg().map((value) => value.toFixed(2)).join(' ')})`);
    log(`bench:scale on ${backend.description}${backendPid ? `, server pid ${backendPid}` : ', its process not found here (no backend CPU)'}`);
    const ctx: ScaleContext = { uri: backend.uri, db: admin.db(dbName), backendPid, settleMs: flags.settleMs, measureMs: flags.measureMs, log };
    const keep = (row: ScaleRow, what: string): void => {
      rows.push(row);
      log(`${what}: done in ${row.elapsedS.toFixed(0)} s`);
    };
    for (const n of flags.sizes.waiters ?? []) for (const streams of flags.streams.waiters) keep(await waitersScenario(ctx, n, streams), `waiters ${n}, streams ${streams ? 'on' : 'off'}`);
    for (const leaseMs of flags.leasesMs) for (const n of flags.sizes.held ?? []) keep(await heldScenario(ctx, n, leaseMs, flags.holdMs), `held ${n}, lease ${leaseMs} ms`);
    for (const p of flags.sizes.processes ?? []) for (const streams of flags.streams.processes) keep(await processesScenario(ctx, p, streams), `processes ${p}, streams ${streams ? 'on' : 'off'}`);
  } finally {
    killAllWorkers();
    await admin.db(dbName).dropDatabase().catch(() => undefined);
    await admin.close();
    await backend.stop();
  }
  const results: ScaleResults = {
    backend: backend.description,
    server: backend.server,
    faithfulLauncher: backend.server === 'mongo-java-server' && existsSync(join(__dirname, '..', 'support', 'java', 'MongodOplog.java')),
    label: flags.label,
    args: process.argv.slice(2),
    date: new Date().toISOString(),
    commit: commitOf(),
    machine: `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}`,
    settings: { settleMs: flags.settleMs, measureMs: flags.measureMs, holdMs: flags.holdMs, quick: flags.quick },
    rows,
  };
  const markdown = renderScale(results);
  mkdirSync(flags.out, { recursive: true });
  writeFileSync(join(flags.out, `${flags.name}.json`), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(flags.out, `${flags.name}.md`), markdown);
  console.log(markdown);
}

if (require.main === module)
  main().catch((error: unknown) => {
    console.error(error instanceof UsageError ? `bench:scale: ${error.message}` : error);
    process.exit(error instanceof UsageError ? 2 : 1);
  });
