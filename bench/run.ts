/**
 * `npm run bench`: monglock against the other MongoDB lock libraries and against the floor (a
 * bare findOneAndUpdate), on one MongoDB backend, in one run. `--smoke` is a seconds-long run
 * (part of `npm test`); it writes to .cache/bench-smoke instead of bench/results.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { contenders, type Contender } from './contenders';
import { runGoPeers, type GoOutcome } from './go-peers';
import { renderChart, renderTable, type ContenderResult, type Results } from './report';
import { commands, hot, latency, manyResources } from './workloads';

const smoke = process.argv.includes('--smoke');
const settings = smoke
  ? { rounds: 1, latencyIterations: 30, hotMs: 250, workers: [1, 4, 16], manyResources: 200, manyWorkers: 8, manyRounds: 1 }
  : { rounds: 3, latencyIterations: 300, hotMs: 2_000, workers: [1, 4, 16, 64], manyResources: 10_000, manyWorkers: 16, manyRounds: 1 };
const outDir = smoke ? join(__dirname, '..', '.cache', 'bench-smoke') : join(__dirname, 'results');

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : (sorted[Math.floor((sorted.length - 1) / 2)]! + sorted[Math.ceil((sorted.length - 1) / 2)]!) / 2;
}

async function main(): Promise<void> {
  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  console.error(`MongoDB: ${backend.description}${smoke ? ' (smoke run)' : ''}`);
  const client = new MongoClient(backend.uri, { monitorCommands: true, maxPoolSize: 100 });
  try {
    await client.connect();
    const db = client.db(`monglock_bench_${randomBytes(3).toString('hex')}`);
    const fresh = async () => {
      const collection = db.collection(`c_${randomBytes(5).toString('hex')}`);
      return collection;
    };
    const list = await contenders(db);
    const samples = new Map<Contender, { latency: number[][]; hot: Map<number, number[][]>; many: number[] }>();
    const failures = new Map<Contender, string>();
    for (const contender of list) samples.set(contender, { latency: [], hot: new Map(settings.workers.map((w) => [w, []])), many: [] });

    const measure = async (contender: Contender, what: string, body: () => Promise<void>): Promise<void> => {
      if (failures.has(contender)) return;
      try {
        await body();
      } catch (error) {
        failures.set(contender, `${what}: ${error instanceof Error ? error.message : String(error)}`);
        console.error(`  ${contender.name} failed in ${what}: ${failures.get(contender)}`);
      }
    };

    // Warm-up (untimed): the server's JIT and caches, the connection pool, every code path.
    console.error('warm-up');
    for (const contender of list) {
      await measure(contender, 'warm-up', async () => void (await latency(contender, fresh, smoke ? 20 : 200)));
      console.error(`  warmed up: ${contender.name}`);
    }

    for (let round = 1; round <= settings.rounds; round++) {
      console.error(`round ${round}/${settings.rounds}`);
      for (const contender of list) {
        const s = samples.get(contender)!;
        await measure(contender, 'latency', async () => {
          const result = await latency(contender, fresh, settings.latencyIterations);
          s.latency.push([result.p50, result.p99]);
        });
        if (contender.kind !== 'floor') {
          for (const workers of settings.workers) {
            await measure(contender, `hot x${workers}`, async () => {
              const result = await hot(contender, fresh, workers, settings.hotMs);
              s.hot.get(workers)!.push([result.perSecond, result.fairness]);
            });
          }
        }
        if (round <= settings.manyRounds) await measure(contender, 'many resources', async () => {
          s.many.push(await manyResources(contender, fresh, settings.manyResources, settings.manyWorkers));
        });
        console.error(`  ${contender.name}: done`);
      }
    }

    const results: ContenderResult[] = [];
    for (const contender of list) {
      const s = samples.get(contender)!;
      let counted: ContenderResult['commands'] = null;
      await measure(contender, 'commands', async () => {
        counted = await commands(contender, fresh, client);
      });
      results.push({
        name: contender.name,
        kind: contender.kind,
        note: contender.note,
        failed: failures.get(contender),
        latency: s.latency.length ? { p50: median(s.latency.map((x) => x[0]!)), p99: median(s.latency.map((x) => x[1]!)) } : null,
        hot: Object.fromEntries(
          [...s.hot].filter(([, v]) => v.length > 0).map(([w, v]) => [w, { perSecond: median(v.map((x) => x[0]!)), fairness: median(v.map((x) => x[1]!)) }]),
        ),
        manyPerSecond: s.many.length ? median(s.many) : null,
        commands: counted,
      });
    }
    const go: GoOutcome = await runGoPeers(backend.uri, smoke);
    const output: Results = {
      backend: backend.description,
      date: new Date().toISOString(),
      machine: `${process.platform} ${process.arch}, Node ${process.version}`,
      settings,
      contenders: [...results, ...go.results],
      skipped: go.skipped,
    };
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(output, null, 2)}\n`);
    const table = renderTable(output);
    writeFileSync(join(outDir, 'results.md'), table);
    writeFileSync(join(outDir, 'throughput.svg'), renderChart(output));
    console.log(table);
    await db.dropDatabase();
  } finally {
    await client.close();
    await backend.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
