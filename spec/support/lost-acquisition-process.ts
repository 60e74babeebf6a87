/**
 * A child process for the background-work spec: an acquisition whose request is lost before it
 * reaches the server (a network error, simulated), so that the library goes on releasing the lock
 * it may have written until that write can no longer land (the call's 30 s `timeout`). The
 * process then closes its client and prints `{ "timers": n }`: the timers keeping it alive.
 */
import { MongoClient, MongoNetworkError } from 'mongodb';
import { isLockError, writeLock } from '../../lib';
import { wrapWrites } from '../../stress/server-faults';

interface Settings {
  uri: string;
  db: string;
  collection: string;
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as Settings;
  const client = await MongoClient.connect(settings.uri);
  const raw = client.db(settings.db).collection(settings.collection);
  const lost = wrapWrites(raw, (method, args, n, send) =>
    method === 'findOneAndUpdate' && n === 1 ? Promise.reject(new MongoNetworkError('connection reset before the request was sent (simulated)')) : send(args),
  );
  const lock = writeLock({ collection: lost, timeout: 30_000, locktimeout: 60_000 });
  const error = await lock.acquire({ _id: 'a' }).then(() => undefined, (caught: unknown) => caught);
  if (!isLockError(error, 'DbError') || error.lock === undefined) throw new Error(`expected a DbError with err.lock, got ${String(error)}`);
  await new Promise((resolve) => setTimeout(resolve, 500)); // the background release tried, found nothing, and pauses
  await client.close();
  await new Promise((resolve) => setImmediate(resolve));
  console.log(JSON.stringify({ timers: process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length }));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
