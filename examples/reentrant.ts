/** Reentrancy by owner: nested using() calls of one request on one document (docs/api.md: reentrancy). */
import { MongoClient } from 'mongodb';
import { withOwner, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const orders = client.db('monglock_examples').collection<{ _id: string; total: number; lines: number[] }>('orders');
  await orders.deleteMany({ _id: 'order-9' });
  await orders.insertOne({ _id: 'order-9', total: 0, lines: [5, 7] });
  try {
    // #region readme
    const orderLock = writeLock({ collection: orders, locktimeout: 10_000 });

    // A helper that locks the order itself; called on its own, or from code that holds the lock.
    const recomputeTotal = (id: string) =>
      orderLock.using({ _id: id }, { wait: 5_000 }, async (handle) => {
        const order = await orders.findOne({ _id: id });
        const total = (order?.lines ?? []).reduce((a, b) => a + b, 0);
        await orders.updateOne(handle.guard(), { $set: { total } });
        return handle.fence;
      });

    // One request: every acquisition in it is by the same owner, so the nested one re-enters
    // (same fencing token, its own release) instead of waiting for its own caller.
    const [outerFence, innerFence] = await withOwner('request-42', () =>
      orderLock.using({ _id: 'order-9' }, { wait: 5_000 }, async (handle) => {
        await orders.updateOne(handle.guard(), { $set: { lines: [5, 7, 3] } });
        return [handle.fence, await recomputeTotal('order-9')];
      }),
    );
    // #endregion
    const order = await orders.findOne({ _id: 'order-9' });
    console.log(`outer fence ${outerFence}, nested fence ${innerFence}, total ${order?.total}`);
    if (outerFence !== innerFence || order?.total !== 15) throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
