/** A counting semaphore: at most 2 exports of one account at a time, each holder with its own lease (docs/api.md: semaphore). */
import { MongoClient } from 'mongodb';
import { semaphore } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const accounts = client.db('monglock_examples').collection<{ _id: string; exports: number }>('accounts');
  await accounts.deleteMany({ _id: 'acme' });
  await accounts.insertOne({ _id: 'acme', exports: 0 });
  const runExport = async (): Promise<void> => {
    await new Promise((resolve) => setTimeout(resolve, 100));
  };
  try {
    // #region readme
    const exports = semaphore({ collection: accounts, limit: 2, locktimeout: 10_000 });

    // Five exports at once: two run, the others wait (woken as permits come back).
    let running = 0;
    let most = 0;
    await Promise.all(
      [1, 2, 3, 4, 5].map(() =>
        exports.using({ _id: 'acme' }, { wait: 10_000 }, async () => {
          most = Math.max(most, ++running);
          await runExport();
          running--;
        }),
      ),
    );

    const big = await exports.acquire({ _id: 'acme' }, { permits: 2 }); // both permits, one holder
    const refused = await exports.acquire({ _id: 'acme' }).catch((err) => err.subtype); // 'SemaphoreFull'
    const seen = await exports.inspect({ _id: 'acme' }); // seen.permits: { permit: { used: 2, limit: 2 } }
    await big.release();
    // #endregion
    console.log(`at most ${most} exports at once; a third holder: ${refused}; ${seen.permits.permit?.used} of ${seen.permits.permit?.limit} permits held`);
    if (most !== 2 || refused !== 'SemaphoreFull' || seen.permits.permit?.used !== 2) throw new Error(`unexpected: ${most} ${refused}`);
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
