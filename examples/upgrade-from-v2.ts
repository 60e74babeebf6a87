/** Clearing monglock v2's stored fields once every v2 client has stopped (docs/upgrading-from-v2.md). */
import { MongoClient, ObjectId } from 'mongodb';
import { clearV2Locks, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const db = client.db('monglock_examples');
  const v2Orders = db.collection<{ _id: number; total: number; lock: object }>('orders_v2');
  await v2Orders.deleteMany({});
  await v2Orders.insertMany([
    { _id: 1, total: 7, lock: { active: true, timestamp: Date.now() } }, // a v2 writeLock
    { _id: 2, total: 9, lock: { read: [{ timestamp: Date.now(), id: new ObjectId() }], write: [] } }, // v2 multiLock arrays
  ]);
  try {
    // #region readme
    const cleared = await clearV2Locks(db.collection('orders_v2'), { tags: ['read', 'write'] });
    // { writeLocks: 1, tags: { read: 1, write: 1 } }: v2's fields are gone, monglock 3's and your data stay
    // #endregion
    console.log('cleared', JSON.stringify(cleared));
    if (JSON.stringify(cleared) !== JSON.stringify({ writeLocks: 1, tags: { read: 1, write: 1 } })) throw new Error('unexpected');
    const handle = await writeLock({ collection: db.collection('orders_v2') }).acquire({ _id: 1 });
    await handle.release();
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
