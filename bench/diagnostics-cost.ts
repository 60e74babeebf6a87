/**
 * `npm run bench:diagnostics`: what publishing on the diagnostics channels costs an uncontended
 * acquire + release, in one run:
 * 1. monglock's own CPU (stub collection): the uninstrumented call path (the engine calls that
 *    `acquire`/`release` wrap), the public path with no subscriber, and with one subscriber;
 * 2. latency against the real backend, with no subscriber and with one, in alternating blocks.
 */
import { tracingChannel } from 'node:diagnostics_channel';
import { randomBytes } from 'node:crypto';
import { MongoClient } from 'mongodb';
import { CHANNELS } from '../lib/common/diagnostics';
import { DocumentLock } from '../lib/locks/document-lock';
import { resolveTagRules } from '../lib/locks/relationships';
import { knownKeys } from '../lib/common/known-keys';
import { startMongoBackend } from '../support/mongo-backend';
import { stubCollection } from './client-cost';

type Body = () => Promise<void>;

interface Internals {
  acquireNow(filter: unknown, tag: string, params: unknown, lock: unknown, cancellation: unknown, context: unknown): Promise<{ id: string; release(): Promise<void> }>;
  releaseNow(target: unknown, tag: string, proof: unknown, claimed: unknown, params: unknown): Promise<void>;
  acquire(filter: unknown, tag: string, params: unknown): Promise<{ id: string; fence: number; timestamp: number; expiresAt: number; tag: string }>;
  releaseWith(target: unknown, tag: string, proof: unknown, claimed: unknown, params: unknown): Promise<void>;
}

/** A writeLock's core, so that the instrumented and uninstrumented paths can be called alike. */
function core(collection: unknown): Internals {
  const rules = resolveTagRules({ write: 10_000 }, undefined, { write: { cooperative: ['write'] } });
  return new DocumentLock({ collection }, { name: 'writeLock', options: knownKeys<{ collection: unknown }>()(['collection']), rules, conflict: 'LockAlreadyTaken', reportsReacquired: true }) as unknown as Internals;
}

const plain = (lock: Internals): Body => async () => {
  const handle = await lock.acquireNow({ _id: 1 }, 'write', undefined, undefined, undefined, undefined);
  await lock.releaseNow({ _id: 1 }, 'write', { id: handle.id }, handle, undefined);
};
const published = (lock: Internals): Body => async () => {
  const handle = await lock.acquire({ _id: 1 }, 'write', undefined);
  await lock.releaseWith({ _id: 1 }, 'write', { id: handle.id }, handle, undefined);
};

/** One no-op subscriber on every call channel, while `body` runs. */
async function subscribed<T>(body: () => Promise<T>): Promise<T> {
  const handlers = { start() {}, end() {}, asyncStart() {}, asyncEnd() {}, error() {} };
  const channels = [CHANNELS.acquire, CHANNELS.release].map((name) => tracingChannel(name));
  for (const channel of channels) channel.subscribe(handlers);
  try {
    return await body();
  } finally {
    for (const channel of channels) channel.unsubscribe(handlers);
  }
}

async function cpu(iterations: number, body: Body): Promise<number> {
  const start = process.cpuUsage();
  for (let i = 0; i < iterations; i++) await body();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / iterations;
}

async function wall(iterations: number, body: Body): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) await body();
  return Number(process.hrtime.bigint() - start) / 1e3 / iterations;
}

/** Medians over `rounds` alternating rounds of each measurement (so drift hits all alike). */
async function alternate(rounds: number, measurements: Record<string, () => Promise<number>>): Promise<Record<string, number>> {
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(measurements).map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    for (const [name, measure] of Object.entries(measurements)) samples[name]!.push(await measure());
  }
  return Object.fromEntries(Object.entries(samples).map(([name, values]) => [name, values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!]));
}

async function main(): Promise<void> {
  const stub = core(stubCollection());
  for (let i = 0; i < 5_000; i++) await published(stub)();
  const onStub = await alternate(15, {
    uninstrumented: () => cpu(20_000, plain(stub)),
    'no subscriber': () => cpu(20_000, published(stub)),
    'one subscriber': () => subscribed(() => cpu(20_000, published(stub))),
  });
  const line = (figures: Record<string, number>, unit: string): string =>
    Object.entries(figures)
      .map(([name, value]) => `${name} ${value.toFixed(2)} ${unit} (${(value / figures.uninstrumented!).toFixed(3)}×)`)
      .join(', ');
  console.log(`library CPU per acquire + release (stub collection, median of 15 rounds of 20,000): ${line(onStub, 'µs')}`);

  const backend = await startMongoBackend((text) => console.error(`[backend] ${text}`));
  const client = await MongoClient.connect(backend.uri, { maxPoolSize: 1 });
  try {
    const db = client.db(`monglock_diag_${randomBytes(3).toString('hex')}`);
    const collection = db.collection('docs');
    await collection.insertOne({ _id: 1 as never });
    const real = core(collection);
    for (let i = 0; i < 500; i++) await published(real)();
    const onServer = await alternate(9, {
      uninstrumented: () => wall(400, plain(real)),
      'no subscriber': () => wall(400, published(real)),
      'one subscriber': () => subscribed(() => wall(400, published(real))),
    });
    console.log(`latency per acquire + release on ${backend.description} (median of 9 rounds of 400): ${line(onServer, 'µs')}`);
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
