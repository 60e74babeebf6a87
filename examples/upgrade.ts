/** Read → write upgrade and downgrade of one held lock (docs/api.md: convert). */
import { MongoClient } from 'mongodb';
import { multiLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const prices = client.db('monglock_examples').collection<{ _id: string; price: number }>('prices');
  await prices.deleteMany({ _id: 'sku-1' });
  await prices.insertOne({ _id: 'sku-1', price: 100 });
  try {
    // #region readme
    const rw = multiLock({
      collection: prices,
      locktimeouts: { read: 5000, write: 5000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });

    const handle = await rw.acquire({ _id: 'sku-1' }, { tag: 'read', document: { price: 1 } });
    if (handle.document.price < 120) {
      // Upgrade in one update: no writer can slip in between the read and the write. With `wait`,
      // new readers are refused until the other readers are gone (writer preference); a second
      // reader upgrading at the same time is refused at once (UpgradeConflict), never deadlocked.
      await handle.convert('write', { wait: 2000 });
      await prices.updateOne(handle.guard(), { $set: { price: 120 } }); // handle.tag is 'write', with a new fence
      await handle.convert('read'); // downgrade: readers are admitted again
    }
    await handle.release();
    // #endregion
    const after = await prices.findOne({ _id: 'sku-1' });
    console.log(`price ${after?.price}, last tag ${handle.tag}, fence ${handle.fence}`);
    if (after?.price !== 120 || handle.tag !== 'read') throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
