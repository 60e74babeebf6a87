/**
 * A child process for the minimum-hold spec: one instance of a scheduled job. From `start` (local
 * ms since the epoch) on, every `interval` ms, it tries the job with `minHold` and no wait, late by
 * a random part of `lateBy` ms; when it wins, it records the tick and the acquisition stamp (server
 * time) under the lock and releases at once. Prints `done` at the end.
 */
import { MongoClient } from 'mongodb';
import { writeLock } from '../../lib';

interface Settings {
  uri: string;
  db: string;
  collection: string;
  name: string;
  start: number;
  interval: number;
  ticks: number;
  minHold: number;
  lateBy: number;
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as Settings;
  const client = await MongoClient.connect(settings.uri);
  const jobs = client.db(settings.db).collection<{ _id: string; runs: Array<{ tick: number; by: string; stamp: number }> }>(settings.collection);
  const lock = writeLock({ collection: jobs, locktimeout: 30_000 });
  try {
    for (let tick = 0; tick < settings.ticks; tick++) {
      const at = settings.start + tick * settings.interval + Math.random() * settings.lateBy;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
      const handle = await lock.acquire({ _id: 'job' }, { minHold: settings.minHold }).catch(() => undefined);
      if (!handle) continue;
      await jobs.updateOne(handle.guard(), { $push: { runs: { tick, by: settings.name, stamp: handle.timestamp } } });
      await handle.release();
    }
  } finally {
    await client.close();
  }
  console.log('done');
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
