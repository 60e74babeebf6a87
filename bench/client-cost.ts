/**
 * `npm run bench:cost`: the library's own client-side CPU per uncontended acquire + release.
 *
 * 1. Against a stub collection that answers at once (no driver, no server): only monglock's code.
 * 2. Against the real backend: process CPU time per acquire + release, next to the same commands
 *    sent through the bare driver: the exact arguments of monglock's findOneAndUpdate and updateOne
 *    (filter, update, options), recorded from one acquire + release and sent again with their time
 *    stamps moved to now (bench/floors.ts), so that each acquisition matches and writes as
 *    monglock's does: the difference is what the library adds on top of the driver.
 *
 * `--cpu-prof` (node's) on this script writes a profile to look at where the time goes.
 */
import { randomBytes } from 'node:crypto';
import type { Collection, Document } from 'mongodb';
import { MongoClient } from 'mongodb';
import { writeLock } from '../lib';
import { startMongoBackend } from '../support/mongo-backend';
import { recordExact, shifted } from './floors';

/** CPU µs per iteration of `body`, after a warm-up. */
async function cpuPerIteration(iterations: number, body: () => Promise<void>): Promise<number> {
  for (let i = 0; i < Math.min(2_000, iterations / 5); i++) await body();
  const start = process.cpuUsage();
  for (let i = 0; i < iterations; i++) await body();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / iterations;
}

/** A collection that answers every lock command at once, with replies shaped as MongoDB's. */
export function stubCollection(): Collection<Document> {
  let fence = 0;
  const reply = (update: Document): Document => {
    fence++;
    const set = (update.$set ?? {}) as Record<string, unknown>;
    const entries = Object.entries(set).find(([key]) => key.startsWith('lock.tags.'))?.[1];
    return { _id: 1, lock: { fence, now: new Date(), tags: { write: entries ?? [] } } };
  };
  const stub = {
    collectionName: 'stub',
    dbName: 'stub',
    findOneAndUpdate: async (_filter: Document, update: Document) => reply(update),
    updateOne: async () => ({ acknowledged: true, matchedCount: 1, modifiedCount: 1, upsertedCount: 0, upsertedId: null }),
    aggregate: () => ({ toArray: async () => [] }),
  };
  return stub as unknown as Collection<Document>;
}

async function main(): Promise<void> {
  const iterations = Number(process.argv[process.argv.indexOf('--iterations') + 1]) || 20_000;
  const stubLock = writeLock({ collection: stubCollection() });
  const stub = await cpuPerIteration(iterations, async () => {
    const handle = await stubLock.acquire({ _id: 1 });
    await handle.release();
  });
  console.log(`library only (stub collection): ${stub.toFixed(1)} µs CPU per acquire + release`);

  const backend = await startMongoBackend((line) => console.error(`[backend] ${line}`));
  const client = await MongoClient.connect(backend.uri, { maxPoolSize: 1 });
  try {
    const db = client.db(`monglock_cost_${randomBytes(3).toString('hex')}`);
    const collection = db.collection('docs');
    await collection.insertOne({ _id: 1 as never });
    const lock = writeLock({ collection });
    const real = Math.min(iterations, 5_000);
    const library = await cpuPerIteration(real, async () => {
      const handle = await lock.acquire({ _id: 1 });
      await handle.release();
    });
    const sent = await recordExact(collection, 1, writeLock, 30_000);
    const driver = await cpuPerIteration(real, async () => {
      await collection.findOneAndUpdate(...shifted(sent.acquire, Date.now() - sent.at));
      await collection.updateOne(...sent.release);
    });
    console.log(`on ${backend.description}: monglock ${library.toFixed(1)} µs CPU per acquire + release; its exact two commands through the bare driver ${driver.toFixed(1)} µs; the library adds ${(library - driver).toFixed(1)} µs`);
    await db.dropDatabase();
  } finally {
    await client.close();
    await backend.stop();
  }
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
