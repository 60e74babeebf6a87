/**
 * `npm run bench:cost`: the library's own client-side CPU per uncontended acquire + release.
 *
 * 1. Against a stub collection that answers at once (no driver, no server): only monglock's code.
 * 2. Against the real backend: process CPU time per acquire + release, next to the same commands
 *    sent through the bare driver: the exact arguments of monglock's findOneAndUpdate and updateOne
 *    (filter, update, options), recorded from one acquire + release and sent again as they are,
 *    so that the difference is what the library adds on top of the driver.
 *
 * `--cpu-prof` (node's) on this script writes a profile to look at where the time goes.
 */
import { randomBytes } from 'node:crypto';
import type { Collection, Document } from 'mongodb';
import { MongoClient } from 'mongodb';
import { writeLock } from '../lib';
import { startMongoBackend } from '../support/mongo-backend';

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

/** The arguments monglock passes to the driver for one acquire (findOneAndUpdate) and one release (updateOne) of document 1. */
async function recordedCommands(collection: Collection<Document>): Promise<Record<'findOneAndUpdate' | 'updateOne', unknown[]>> {
  const sent: Partial<Record<string, unknown[]>> = {};
  const recording = new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (property === 'findOneAndUpdate' || property === 'updateOne') sent[property] = args;
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  const lock = writeLock({ collection: recording });
  await (await lock.acquire({ _id: 1 })).release();
  if (!sent.findOneAndUpdate || !sent.updateOne) throw new Error('monglock sent no findOneAndUpdate or updateOne');
  return { findOneAndUpdate: sent.findOneAndUpdate, updateOne: sent.updateOne };
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
    const sent = await recordedCommands(collection);
    const driver = await cpuPerIteration(real, async () => {
      await collection.findOneAndUpdate(...(sent.findOneAndUpdate as Parameters<Collection<Document>['findOneAndUpdate']>));
      await collection.updateOne(...(sent.updateOne as Parameters<Collection<Document>['updateOne']>));
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
