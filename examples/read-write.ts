/** A read/write lock from tags (README: Lock kinds; docs/api.md: Relationships). */
import { MongoClient } from 'mongodb';
import { multiLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string }>('documents');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 'doc' });
  const filter = { _id: 'doc' };
  try {
    // #region readme
    const rw = multiLock({
      collection,
      locktimeouts: { read: 2000, write: 20000 },
      lockRelationships: {
        read: { cooperative: ['write'] }, // readers wait for writers
        write: { cooperative: ['write'], assertive: ['read'] }, // one writer, which waits for readers to drain
      },
    });

    const reader = await rw.acquire(filter, { tag: 'read' });
    setTimeout(() => void reader.release(), 200); // the reader finishes a little later

    // Without `wait`: AssertiveLock (409), err.lock is registered, call acquire(filter, { lock }) again.
    // With `wait`: the continuations are made for you until the readers are gone.
    const writer = await rw.acquire(filter, { tag: 'write', wait: 5000 });
    const refused = await rw.acquire(filter, { tag: 'read' }).catch((err) => err.subtype); // 'CooperativeLock'
    await writer.release();
    // #endregion
    console.log('refused reader:', refused);
    if (refused !== 'CooperativeLock') throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
