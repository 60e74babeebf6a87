/**
 * Calls to an external API limited to 4 per second across three processes (docs/api.md: rate
 * limits): a semaphore whose permits are taken with `minHold` admits at most `limit` of them whose
 * acquisitions lie within any `minHold` ms, by the server's clock.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { MongoClient } from 'mongodb';
import { semaphore } from 'monglock';

const uri = process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017';
const CALLS_PER_PROCESS = 4;

/** One process calling the API as fast as the shared limit allows; it records each call's stamp (server time). */
async function caller(): Promise<void> {
  const client = await MongoClient.connect(uri);
  const limits = client.db('monglock_examples').collection<{ _id: string; calls: number[] }>('rate_limits');
  const callApi = async (): Promise<void> => {
    await new Promise((resolve) => setTimeout(resolve, 20)); // the external call
  };
  try {
    // #region readme
    const geoApi = semaphore({ collection: limits, limit: 4, locktimeout: 10_000 });

    for (let i = 0; i < CALLS_PER_PROCESS; i++) {
      // Waits (as long as it takes) until fewer than 4 calls were made in the last second, in any process.
      await geoApi.using({ _id: 'geo-api' }, { minHold: 1_000, wait: Infinity }, async (permit) => {
        await callApi();
        await limits.updateOne({ _id: 'geo-api' }, { $push: { calls: permit.timestamp } });
      });
    }
    // #endregion
  } finally {
    await client.close();
  }
}

/** Starts three callers in processes of their own, then checks the calls' stamps: never more than 4 within one second. */
async function main(): Promise<void> {
  const client = await MongoClient.connect(uri);
  const limits = client.db('monglock_examples').collection<{ _id: string; calls: number[] }>('rate_limits');
  await limits.deleteMany({ _id: 'geo-api' });
  await limits.insertOne({ _id: 'geo-api', calls: [] });
  try {
    const run = promisify(execFile);
    await Promise.all([1, 2, 3].map(() => run(process.execPath, [...process.execArgv, __filename, 'caller'], { env: process.env })));
    const calls = ((await limits.findOne({ _id: 'geo-api' }))?.calls ?? []).sort((a, b) => a - b);
    const crowded = calls.filter((stamp, i) => i + 4 < calls.length && (calls[i + 4] ?? Infinity) - stamp < 1_000);
    console.log(`${calls.length} calls over ${((calls.at(-1) ?? 0) - (calls[0] ?? 0)) / 1000} s; windows of 1 s with more than 4 calls: ${crowded.length}`);
    if (calls.length !== 3 * CALLS_PER_PROCESS || crowded.length > 0) throw new Error('more than 4 calls in one second');
  } finally {
    await client.close();
  }
}

(process.argv[2] === 'caller' ? caller() : main()).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
