/**
 * `npm run bench`: monglock against the other MongoDB lock libraries and against the floor (a
 * bare findOneAndUpdate), on one MongoDB backend, in one run, at three modelled majority-commit
 * delays: a {@link MajorityProxy} in front of the server holds the reply to every write sent with a
 * majority write concern for L = 0, 2 and 5 ms, as a replica set's primary does. `--smoke` is a
 * seconds-long run (part of `npm test`); it writes to .cache/bench-smoke instead of bench/results.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { contenders, type Contender } from './contenders';
import { runGoPeers, type GoOutcome } from './go-peers';
import { median } from './harness';
import { MajorityProxy } from './majority-proxy';
import { writeTargets } from './targets';
import { renderChart, renderTable, type ContenderResult, type LevelResults, type Results } from './report';
import { commands, hot, latency, manyResources, readModifyWrite } from './workloads';

const smoke = process.argv.includes('--smoke');
const settings = smoke
  ? { rounds: 1, latencyIterations: 10, hotMs: 100, workers: [16], manyResources: [20, 20], manyWorkers: 4, rmwIterations: 5, delays: [0, 5] }
  : { rounds: 2, latencyIterations: 200, hotMs: 1_500, workers: [1, 4, 16, 64], manyResources: [10_000, 1_000], manyWorkers: 16, rmwIterations: 100, delays: [0, 2, 5] };
/** `--delays 0,5` and `--rounds 3` override the settings (for a before/after comparison at chosen levels). */
function flag(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}
const delaysFlag = flag('--delays');
if (delaysFlag) Object.assign(settings, { delays: delaysFlag.split(',').map(Number) });
const roundsFlag = flag('--rounds');
if (roundsFlag) Object.assign(settings, { rounds: Number(roundsFlag) });
const outFlag = flag('--out');
const outDir = outFlag ? join(process.cwd(), outFlag) : smoke ? join(__dirname, '..', '.cache', 'bench-smoke') : join(__dirname, 'results');

/** Every workload of every contender through a proxy that delays majority writes by `delayMs`. */
async function runLevel(host: string, port: number, delayMs: number): Promise<LevelResults> {
  const proxy = new MajorityProxy(host, port, delayMs);
  await proxy.start();
  const client = new MongoClient(proxy.uri(), { monitorCommands: true, maxPoolSize: 100 });
  const manyCount = delayMs === 0 ? settings.manyResources[0]! : settings.manyResources[1]!;
  try {
    await client.connect();
    const db = client.db(`monglock_bench_${randomBytes(3).toString('hex')}`);
    const fresh = async () => db.collection(`c_${randomBytes(5).toString('hex')}`);
    const list = await contenders(db);
    const samples = new Map<Contender, { latency: number[][]; hot: Map<number, number[][]>; many: number[]; rmw: number[][] }>();
    const failures = new Map<Contender, string>();
    for (const contender of list) samples.set(contender, { latency: [], hot: new Map(settings.workers.map((w) => [w, []])), many: [], rmw: [] });

    const measure = async (contender: Contender, what: string, body: () => Promise<void>): Promise<void> => {
      if (failures.has(contender)) return;
      try {
        await body();
      } catch (error) {
        failures.set(contender, `${what}: ${error instanceof Error ? error.message : String(error)}`);
        console.error(`  ${contender.name} failed in ${what}: ${failures.get(contender)}`);
      }
    };

    console.error(`L = ${delayMs} ms: warm-up`);
    for (const contender of list) {
      if (!contender.readModifyWriteOnly) await measure(contender, 'warm-up', async () => void (await latency(contender, fresh, smoke ? 5 : 100)));
    }

    for (let round = 1; round <= settings.rounds; round++) {
      console.error(`L = ${delayMs} ms: round ${round}/${settings.rounds} (load average ${loadavg().map((l) => l.toFixed(2)).join(' ')})`);
      for (const contender of list) {
        const s = samples.get(contender)!;
        const shaped = contender.name.includes('shaped');
        if (contender.readModifyWriteOnly) {
          await measure(contender, 'read-modify-write', async () => {
            const result = await readModifyWrite(contender, fresh, settings.rmwIterations);
            s.rmw.push([result.p50, result.p99]);
          });
          continue;
        }
        await measure(contender, 'latency', async () => {
          const result = await latency(contender, fresh, settings.latencyIterations);
          s.latency.push([result.p50, result.p99]);
        });
        if (contender.kind !== 'floor') {
          for (const workers of settings.workers) {
            await measure(contender, `hot x${workers}`, async () => {
              const result = await hot(contender, fresh, workers, settings.hotMs);
              s.hot.get(workers)!.push([result.perSecond, result.fairness, result.worstWait]);
            });
          }
        }
        if (contender.readModifyWrite && !shaped) {
          await measure(contender, 'read-modify-write', async () => {
            const result = await readModifyWrite(contender, fresh, settings.rmwIterations);
            s.rmw.push([result.p50, result.p99]);
          });
        }
        if (round === 1 && !contender.name.includes('fair') && !contender.name.includes('exact')) {
          await measure(contender, 'many resources', async () => {
            s.many.push(await manyResources(contender, fresh, manyCount, settings.manyWorkers));
          });
        }
        console.error(`  ${contender.name}: done`);
      }
    }

    const results: ContenderResult[] = [];
    for (const contender of list) {
      const s = samples.get(contender)!;
      let counted: ContenderResult['commands'] = null;
      // Counted on a client of its own: other contenders' background commands (timers, renewals) are not counted.
      if (!contender.readModifyWriteOnly) await measure(contender, 'commands', async () => {
        const own = new MongoClient(proxy.uri(), { monitorCommands: true });
        try {
          await own.connect();
          const ownDb = own.db(db.databaseName);
          counted = await commands(contender, async () => ownDb.collection(`c_${randomBytes(5).toString('hex')}`), own, () => proxy.counts.majority);
        } finally {
          await own.close();
        }
      });
      results.push({
        name: contender.name,
        kind: contender.kind,
        note: contender.note,
        writeConcern: contender.writeConcern,
        unsafe: contender.unsafe,
        failed: failures.get(contender),
        latency: s.latency.length ? { p50: median(s.latency.map((x) => x[0]!)), p99: median(s.latency.map((x) => x[1]!)) } : null,
        hot: Object.fromEntries(
          [...s.hot]
            .filter(([, v]) => v.length > 0)
            .map(([w, v]) => [w, { perSecond: median(v.map((x) => x[0]!)), fairness: median(v.map((x) => x[1]!)), worstWait: Math.max(...v.map((x) => x[2]!)) }]),
        ),
        manyPerSecond: s.many.length ? median(s.many) : null,
        rmw: s.rmw.length ? { p50: median(s.rmw.map((x) => x[0]!)), p99: median(s.rmw.map((x) => x[1]!)) } : null,
        commands: counted,
      });
    }
    await db.dropDatabase();
    return { delayMs, loadAverage: loadavg(), manyResources: manyCount, majorityWrites: proxy.counts.majority, contenders: results };
  } finally {
    await client.close();
    await proxy.stop();
  }
}

async function main(): Promise<void> {
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  console.error(`MongoDB: ${backend.description}${smoke ? ' (smoke run)' : ''}`);
  const { hostname, port } = new URL(backend.uri.replace(/^mongodb:/, 'http:'));
  try {
    const levels: LevelResults[] = [];
    for (const delayMs of settings.delays) levels.push(await runLevel(hostname, Number(port), delayMs));
    const go: GoOutcome = await runGoPeers(backend.uri, smoke);
    if (go.results.length > 0) levels[0] = { ...levels[0]!, contenders: [...levels[0]!.contenders, ...go.results] };
    const output: Results = {
      backend: backend.description,
      date: new Date().toISOString(),
      machine: `${process.platform} ${process.arch}, Node ${process.version}`,
      settings,
      levels,
      skipped: go.skipped,
    };
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(output, null, 2)}\n`);
    const table = renderTable(output);
    writeFileSync(join(outDir, 'results.md'), table);
    writeFileSync(join(outDir, 'throughput.svg'), renderChart(output));
    writeTargets(outDir);
    console.log(table);
  } finally {
    await backend.stop();
  }
}

// Some peers leave timers behind them (about 10 s of them): exit once the results are written.
main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
