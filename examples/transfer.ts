/** Several documents at once: transfers between two accounts, both directions at once, never a deadlock (docs/api.md: acquireAll). */
import { MongoClient } from 'mongodb';
import { acquireAll, commitAll, usingAll, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const accounts = client.db('monglock_examples').collection<{ _id: string; balance: number }>('accounts');
  await accounts.deleteMany({ _id: { $in: ['alice', 'bob'] } });
  await accounts.insertMany([{ _id: 'alice', balance: 100 }, { _id: 'bob', balance: 100 }]);
  try {
    // #region readme
    const locks = writeLock({ collection: accounts, locktimeout: 5_000 });
    const transfer = (from: string, to: string, amount: number) =>
      usingAll(
        [{ lock: locks, filter: { _id: from } }, { lock: locks, filter: { _id: to } }],
        { wait: 10_000, document: { balance: 1 } }, // both balances come back with the locks
        ([source]) => {
          if (source.document.balance < amount) return 'insufficient funds';
          return commitAll([{ $inc: { balance: -amount } }, { $inc: { balance: amount } }], 'done');
        },
      );

    // Ten transfers each way at once: all finish (no deadlock), and the money is all there.
    const outcomes = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8, 9, 10].flatMap(() => [transfer('alice', 'bob', 3), transfer('bob', 'alice', 2)]));

    // Or hold the group yourself: the handles come back in the order asked.
    const [bob, alice] = await acquireAll([{ lock: locks, filter: { _id: 'bob' } }, { lock: locks, filter: { _id: 'alice' } }]);
    const busy = await locks.acquire({ _id: 'alice' }).catch((err) => err.subtype); // 'LockAlreadyTaken'
    await Promise.all([bob.release(), alice.release()]);
    // #endregion
    const total = (await accounts.find({ _id: { $in: ['alice', 'bob'] } }).toArray()).reduce((sum, doc) => sum + doc.balance, 0);
    console.log(`${outcomes.filter((o) => o === 'done').length} transfers done; total ${total}; a single lock meanwhile: ${busy}`);
    if (total !== 200 || busy !== 'LockAlreadyTaken' || outcomes.length !== 20) throw new Error(`unexpected: ${total} ${busy}`);
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
