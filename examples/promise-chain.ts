/** A promise chain that retries in the caller with bluebird (docs/api.md: Promise libraries). */
import Bluebird from 'bluebird';
import { MongoClient } from 'mongodb';
import { LockError, writeLock, type LockHandle } from 'monglock';
import 'monglock/bluebird'; // types the lock's promises as bluebird's

interface Job {
  _id: number;
  runs: number;
}

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<Job>('jobs');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 1, runs: 0 });
  const work = (): Promise<unknown> => collection.updateOne({ _id: 1 }, { $inc: { runs: 1 } });
  try {
    // #region readme
    const lock = writeLock({ collection, locktimeout: 1000, Promise: Bluebird });

    const acquire = (): Bluebird<LockHandle<Job, typeof Bluebird>> =>
      lock.acquire({ _id: 1 }).catch(LockError, (err) => {
        if (err.subtype !== 'LockAlreadyTaken') throw err;
        return Bluebird.delay(100).then(acquire); // retry in the caller, as with monglock v2
      });

    await Promise.all([1, 2, 3].map(() => acquire().then((handle) => work().finally(() => lock.release({ _id: 1 }, { lock: handle })))));
    // #endregion
    const doc = await collection.findOne({ _id: 1 });
    console.log('runs', doc?.runs);
    if (doc?.runs !== 3) throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
