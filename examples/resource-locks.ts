/** Resource locks in a lock collection (README: Lock kinds; docs/resource-locks.md). */
import { hostname } from 'node:os';
import { MongoClient } from 'mongodb';
import { resourceLocks } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const db = client.db('monglock_examples');
  await db.collection('locks').deleteMany({});
  try {
    // #region readme
    const locks = resourceLocks({ collection: db.collection('locks') });
    await locks.createIndexes();

    const run = await locks.xlock('invoice-run', 'job-42', { owner: 'billing', host: hostname(), ttl: 30_000 });
    await locks.slock('price-list', 'job-42', { owner: 'billing', ttl: 30_000 }, 10); // at most 10 shared holders
    await locks.renew('job-42', 60_000); // every lock of the group, from the server's now
    const held = await locks.status({ owner: 'billing' });
    const released = await locks.unlock('job-42'); // both, newest first
    await locks.purge(); // expired locks and empty resource documents
    // #endregion
    console.log(run.fence, held.map((s) => `${s.resource}:${s.type}`), released.length);
    if (held.length !== 2 || released.length !== 2) throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
