/** A stale holder's guarded write matches nothing; the next holder's fencing token is larger (docs/guarantees.md: Guarded writes). */
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string; status: string; fence?: number }>('jobs');
  await collection.deleteMany({ _id: 'job-1' });
  await collection.insertOne({ _id: 'job-1', status: 'open' });
  try {
    // #region readme
    const jobs = writeLock({ collection, locktimeout: 200 });
    const stale = await jobs.acquire({ _id: 'job-1' });
    await new Promise((resolve) => setTimeout(resolve, 400)); // paused past its lease (GC, swap, a partition)
    const next = await jobs.acquire({ _id: 'job-1' }); // the lease ended by the server's clock: taken over

    const late = await collection.updateOne(stale.guard({ status: 'open' }), { $set: { status: 'done' } });
    // late.matchedCount === 0: the stale holder writes nothing, whatever its own clock believes
    const done = await collection.updateOne(next.guard({ status: 'open' }), { $set: { status: 'done', fence: next.fence } });
    // done.modifiedCount === 1, and next.fence > stale.fence: pass it to any other store you write to
    await next.release();
    // #endregion
    console.log('stale write matched', late.matchedCount, '- next holder wrote', done.modifiedCount, 'with fence', next.fence, '>', stale.fence);
    if (late.matchedCount !== 0 || done.modifiedCount !== 1 || !(next.fence > stale.fence)) throw new Error('unexpected');
    const refused = await stale.release().then(() => 'released', (error: { subtype?: string }) => error.subtype);
    if (refused !== 'LockNotFound' && refused !== 'LockWasReacquired') throw new Error(`stale release: ${refused}`);
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
