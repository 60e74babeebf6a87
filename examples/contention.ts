/** Contention printed to the console from the diagnostics channels (docs/observability.md: Events). */
import { subscribe, tracingChannel } from 'node:diagnostics_channel';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';
import type { LeaseLostEvent, LockCallContext } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string }>('contended');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 'hot' });
  const printed: string[] = [];
  const log = (line: string): void => void (printed.push(line), console.log(line));
  try {
    // #region readme
    tracingChannel<object, LockCallContext>('monglock:acquire').subscribe({
      start() {},
      end() {},
      asyncStart() {},
      error() {},
      asyncEnd(call) {
        // Waited (in this process a waiter sleeps until a release wakes it: few attempts) or failed.
        if (call.outcome !== 'acquired' || (call.durationMs ?? 0) > 10) {
          log(`${call.namespace} ${call.tag}: ${call.outcome} after ${call.durationMs?.toFixed(0)} ms, ${call.attempts} attempt(s)`);
        }
      },
    });
    // A plain channel's messages are `unknown` to node's types: narrowed by a check, not cast.
    const isLeaseLost = (message: unknown): message is LeaseLostEvent => typeof message === 'object' && message !== null && 'lockId' in message;
    subscribe('monglock:lease-lost', (message) => {
      if (isLeaseLost(message)) log(`lost ${message.tag} lock ${message.lockId}: ${message.cause}`);
    });
    // #endregion
    const lock = writeLock({ collection, locktimeout: 5_000 });
    await Promise.all(Array.from({ length: 4 }, () => lock.using({ _id: 'hot' }, { wait: 5_000 }, () => new Promise((done) => setTimeout(done, 20)))));
    if (!printed.some((line) => / write: acquired after \d+ ms/.test(line))) throw new Error('no contention was printed');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
