/** A read-modify-write folded into the lock's own writes (docs/api.md: Read-modify-write in two commands). */
import { MongoClient } from 'mongodb';
import { commit, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string; balance: number; history: number[] }>('accounts');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 'acc-1', balance: 100, history: [] });
  try {
    // #region readme
    const accounts = writeLock({ collection, locktimeout: 5000 });

    // Two commands: the acquisition returns the document, the release writes it, only if the
    // lock is still held (else it rejects, nothing is written, and the lock is released).
    const balance = await accounts.using({ _id: 'acc-1' }, { wait: 2000, document: { balance: 1 } }, (lock) => {
      const next = lock.document.balance - 30;
      if (next < 0) throw new Error('insufficient funds'); // released, nothing written
      return commit({ $set: { balance: next }, $push: { history: -30 } }, next);
    });
    // #endregion
    console.log('balance', balance);
    const stored = await collection.findOne({ _id: 'acc-1' });
    if (balance !== 70 || stored?.balance !== 70 || stored.history.length !== 1) throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
