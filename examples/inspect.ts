/** A look without locking: who holds a document, until when, and who waits (docs/api.md: inspect). */
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const orders = client.db('monglock_examples').collection<{ _id: string; status: string }>('orders');
  await orders.deleteMany({ _id: 'order-7' });
  await orders.insertOne({ _id: 'order-7', status: 'open' });
  try {
    const lock = writeLock({ collection: orders, locktimeout: 5000 });
    const handle = await lock.acquire({ _id: 'order-7' });
    // #region readme
    const seen = await lock.inspect({ _id: 'order-7' }); // one read on the primary; nothing is written
    for (const held of seen.locks) {
      console.log(`${held.tag} lock ${held.id} since ${held.acquiredAt.toISOString()}, ${held.remaining} ms left`);
    }
    console.log(`${seen.waiting.length} waiting (fair mode); latest fencing token ${seen.fence}`);
    // #endregion
    if (seen.locks.length !== 1 || seen.locks[0]?.id !== handle.id || seen.fence !== handle.fence) throw new Error('unexpected');
    await handle.release();
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
