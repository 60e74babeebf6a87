/**
 * A child process for the fair-mode tests: fair waiters on one document. Once connected it prints
 * `{"ready":true}` and waits for a line `{"go":<ms since the epoch>}` on stdin (so that a slow
 * start on a loaded machine never shifts the schedule); waiter `i` then calls acquire at
 * `go + offsets[i]`, holds the lock for `holdMs`, and prints one JSON line per acquisition
 * `{ index, fence, calledAt }` (`calledAt`: when it actually called acquire).
 */
import { createInterface } from 'node:readline';
import { MongoClient } from 'mongodb';
import { writeLock } from '../../lib';

interface Settings {
  uri: string;
  db: string;
  collection: string;
  indexes: number[];
  /** ms after the go time at which each waiter calls acquire. */
  offsets: number[];
  holdMs: number;
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as Settings;
  const client = await MongoClient.connect(settings.uri);
  const lock = writeLock({ collection: client.db(settings.db).collection(settings.collection), locktimeout: 10_000, fair: true });
  console.log(JSON.stringify({ ready: true }));
  const lines = createInterface({ input: process.stdin });
  const go = await new Promise<number>((resolve) => lines.once('line', (line) => resolve((JSON.parse(line) as { go: number }).go)));
  lines.close();
  await Promise.all(
    settings.indexes.map(async (index, i) => {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, go + settings.offsets[i]! - Date.now())));
      const calledAt = Date.now();
      const handle = await lock.acquire({ _id: 'fifo' }, { wait: 120_000 });
      console.log(JSON.stringify({ index, fence: handle.fence, calledAt }));
      await new Promise((resolve) => setTimeout(resolve, settings.holdMs));
      await handle.release();
    }),
  );
  await client.close();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
