/** The README's quick start: a read-modify-write in two commands, with `using()`, `document` and `commit()`. */
// #region readme
import { MongoClient } from 'mongodb';
import { commit, writeLock } from 'monglock';

const client = new MongoClient(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
const accounts = client.db('shop').collection<{ _id: string; balance: number }>('accounts');
const lock = writeLock({ collection: accounts, locktimeout: 5000 }); // one per collection, made once

/** Takes `amount` off an account's balance; resolves the new balance. */
function withdraw(id: string, amount: number): Promise<number> {
  // 1st command: lock the document and read it; 2nd: write it and release, only if still held.
  return lock.using({ _id: id }, { wait: 2000, document: { balance: 1 } }, (held) => {
    const balance = held.document.balance - amount;
    if (balance < 0) throw new Error('insufficient funds'); // released, nothing written
    return commit({ $set: { balance } }, balance);
  });
}
// #endregion

async function main(): Promise<void> {
  const id = 'quick-start';
  try {
    await accounts.deleteOne({ _id: id });
    await accounts.insertOne({ _id: id, balance: 100 });
    const balances = await Promise.all([withdraw(id, 30), withdraw(id, 30), withdraw(id, 30)]);
    const refused = await withdraw(id, 30).catch((error: Error) => error.message);
    console.log('balances', balances, 'then', refused);
    const stored = await accounts.findOne({ _id: id });
    if (stored?.balance !== 10 || [...balances].sort().join() !== '10,40,70' || refused !== 'insufficient funds') throw new Error('unexpected');
    await accounts.deleteOne({ _id: id });
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
