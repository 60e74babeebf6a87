/**
 * `npm run bench:election`: how fast an election changes leader. Resign → next leader: a leader
 * resigns while a campaigner with a client of its own (its own change stream, as another process
 * has) waits; a sample is the time from the `resign()` call to the campaigner's term, `--trials`
 * (20) with change streams and as many polling only, interleaved. SIGKILL → next leader: a leader
 * in its own process (stress/leader.ts) is killed while a campaigner waits; a sample is the time
 * from the kill to the campaigner's term, beside what was left of the killed leader's lease
 * (read just before the kill, by the server's clock), `--kills` (5) times. Lease `--lease` ms
 * (1000). Writes bench/results/elections.md and .json.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { MongoClient, type Collection } from 'mongodb';
import { election } from '../lib';
import { startMongoBackend } from '../support/mongo-backend';
import { loadAverage, median, spread, wholeNumberFlags } from './harness';

const ROOT = join(__dirname, '..');
const percentile = (values: readonly number[], p: number): number => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;

/** ms from a resignation to the next leader's term, the campaigner streaming or polling. */
async function resignToNext(leader: Collection, campaigner: Collection, lease: number, changeStreams: boolean): Promise<number> {
  const name = randomBytes(4).toString('hex');
  const term = await election({ collection: leader, lease }).campaign({ _id: name });
  const next = election({ collection: campaigner, lease, changeStreams }).campaign({ _id: name });
  await new Promise((resolve) => setTimeout(resolve, 150)); // the campaigner refused, asleep
  const resignedAt = performance.now();
  await term.resign();
  const successor = await next;
  const took = performance.now() - resignedAt;
  await successor.resign();
  return took;
}

/** ms from a SIGKILL of the leader's process to the next leader's term, and what was left of the killed lease then. */
async function killToNext(uri: string, collection: Collection, lease: number): Promise<{ took: number; left: number }> {
  const name = randomBytes(4).toString('hex');
  const child = spawn(process.execPath, ['--import', 'tsx', join('stress', 'leader.ts'), uri, collection.dbName, collection.collectionName, name, String(lease)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => createInterface({ input: child.stdout }).once('line', () => resolve()));
  const elections = election({ collection, lease });
  const next = elections.campaign({ _id: name });
  await new Promise((resolve) => setTimeout(resolve, 100));
  const seen = await elections.leader({ _id: name });
  const readAt = performance.now();
  const before = await collection.aggregate([{ $limit: 1 }, { $project: { now: '$$NOW' } }]).toArray();
  const serverNow = (before[0]?.now as Date | undefined)?.getTime() ?? Date.now();
  child.kill('SIGKILL');
  const killedAt = performance.now();
  const left = (seen?.expiresAt.getTime() ?? serverNow) - serverNow - (killedAt - readAt);
  const successor = await next;
  const took = performance.now() - killedAt;
  await successor.resign();
  return { took, left };
}

async function main(): Promise<void> {
  const { trials, kills, lease } = wholeNumberFlags(process.argv.slice(2), { trials: 20, kills: 5, lease: 1_000 });
  const backend = await startMongoBackend(() => undefined);
  const [a, b] = [await MongoClient.connect(backend.uri), await MongoClient.connect(backend.uri)];
  const db = `monglock_elections_${randomBytes(3).toString('hex')}`;
  const streaming: number[] = [];
  const polling: number[] = [];
  const killed: Array<{ took: number; left: number }> = [];
  try {
    await a.db(db).collection('elections').insertOne({ _id: 'warm-up' } as never);
    for (let trial = 0; trial < trials; trial++) {
      streaming.push(await resignToNext(a.db(db).collection('elections'), b.db(db).collection('elections'), lease, true));
      polling.push(await resignToNext(a.db(db).collection('elections'), b.db(db).collection('elections'), lease, false));
    }
    for (let kill = 0; kill < kills; kill++) killed.push(await killToNext(backend.uri, a.db(db).collection('elections'), lease));
  } finally {
    await a.db(db).dropDatabase().catch(() => undefined);
    await Promise.all([a.close(), b.close()]);
    await backend.stop();
  }
  const row = (what: string, values: readonly number[]): string => `| ${what} | ${median(values).toFixed(1)} | ${percentile(values, 0.9).toFixed(1)} | ${spread(values, 1)} | ${values.length} |`;
  const excess = killed.map(({ took, left }) => took - left);
  const table = [
    '# Elections: how fast the leader changes',
    '',
    `Generated by \`npm run bench:election\` on ${new Date().toISOString().slice(0, 10)}: ${backend.description}; lease ${lease} ms; load average at the end: ${loadAverage()}. Resign → next: from the \`resign()\` call to the waiting campaigner's term (a client of its own). SIGKILL → next: from the kill of the leader's process to the campaigner's term; "past the lease" subtracts what was left of the killed lease at the kill.`,
    '',
    '| what | median, ms | p90, ms | median (min–max), ms | samples |',
    '|---|---|---|---|---|',
    row('resign → next leader, change streams', streaming),
    row('resign → next leader, polling only', polling),
    row('SIGKILL → next leader', killed.map(({ took }) => took)),
    row('SIGKILL → next leader, past the lease', excess),
    '',
  ].join('\n');
  console.log(table);
  const out = join(__dirname, 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'elections.md'), table);
  writeFileSync(join(out, 'elections.json'), JSON.stringify({ backend: backend.description, lease, streaming, polling, killed }, null, 2));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
