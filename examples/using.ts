/** Scoped lock with automatic extension, lost-lock signal and guarded write (README: Lock kinds; docs/api.md: using()). */
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string; lines: number[]; total: number | null }>('invoices');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 'inv-7', lines: [3, 4], total: null });
  const id = 'inv-7';
  try {
    // #region readme
    const invoices = writeLock({ collection, locktimeout: 300 });

    const total = await invoices.using({ _id: id }, { wait: 2000, document: { lines: 1 } }, async (handle, signal) => {
      await new Promise((resolve) => setTimeout(resolve, 700)); // longer than the lease: it is extended
      if (signal.aborted) throw signal.reason; // the lease was lost
      const sum = handle.document.lines.reduce((a, b) => a + b, 0);
      await collection.updateOne(handle.guard(), { $set: { total: sum } }); // matches only while we hold the lock
      return sum;
    });
    // #endregion
    console.log('total', total);
    if (total !== 7 || (await collection.findOne({ _id: id }))?.total !== 7) throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
