/**
 * Lock outside, commit inside one short transaction (docs/api.md: Transactions).
 * needs: transactions (a replica set or a sharded cluster)
 */
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const db = client.db('monglock_examples');
  const ledger = db.collection('ledger');
  const collection = db.collection<{ _id: string; balance: number }>('tx_accounts');
  await Promise.all([ledger.deleteMany({}), collection.deleteMany({})]);
  await collection.insertOne({ _id: 'acc-1', balance: 100 });
  const accounts = writeLock({ collection, locktimeout: 5000 });
  const session = client.startSession();
  try {
    // #region readme
    // The lock is taken outside; the ledger entry and the balance change commit together, with the release.
    await accounts.using({ _id: 'acc-1' }, { wait: 2000, document: { balance: 1 } }, async (held) => {
      await session.withTransaction(async () => {
        await ledger.insertOne({ account: 'acc-1', amount: -30, fence: held.fence }, { session });
        await held.release({ update: { $inc: { balance: -30 } }, session });
      });
    });
    // #endregion
    const stored = await collection.findOne({ _id: 'acc-1' });
    const entries = await ledger.countDocuments({ account: 'acc-1' });
    console.log('balance', stored?.balance, 'ledger entries', entries);
    if (stored?.balance !== 70 || entries !== 1) throw new Error('unexpected');
    await (await accounts.acquire({ _id: 'acc-1' })).release(); // the lock is free again
  } finally {
    await session.endSession();
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
