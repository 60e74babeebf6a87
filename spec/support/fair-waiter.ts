/**
 * A child process for the fair-mode tests: `waiters` fair waiters on one document, each starting
 * at its scheduled time (`startAt[i]`, ms since the epoch), holding the lock for `holdMs`, and
 * printing one JSON line per acquisition `{ index, fence }`. With `hang`, the waiters never stop
 * waiting (the test kills the process).
 */
import { MongoClient } from 'mongodb';
import { writeLock } from '../../lib';

interface Settings {
  uri: string;
  db: string;
  collection: string;
  indexes: number[];
  startAt: number[];
  holdMs: number;
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as Settings;
  const client = await MongoClient.connect(settings.uri);
  const lock = writeLock({ collection: client.db(settings.db).collection(settings.collection), locktimeout: 10_000, fair: true });
  await Promise.all(
    settings.indexes.map(async (index, i) => {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, settings.startAt[i]! - Date.now())));
      const handle = await lock.acquire({ _id: 'fifo' }, { wait: 120_000 });
      console.log(JSON.stringify({ index, fence: handle.fence }));
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
