/** A poisoned job kept from being picked again: quarantine, Quarantined, inspect, clearQuarantine (docs/api.md: Quarantine). */
import { MongoClient } from 'mongodb';
import { isLockError, quarantine, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const jobs = client.db('monglock_examples').collection<{ _id: string; payload: string; state: string; error?: string }>('jobs');
  await jobs.deleteMany({});
  await jobs.insertMany([
    { _id: 'job-1', payload: '{"n":1', state: 'queued' },
    { _id: 'job-2', payload: '{"n":2}', state: 'queued' },
  ]);
  try {
    // #region readme
    const lock = writeLock({ collection: jobs, locktimeout: 5000 });

    // A worker takes the first queued job that is neither held nor quarantined.
    const outcome = await lock.using({ state: 'queued' }, { document: true }, (held) => {
      try {
        const job: unknown = JSON.parse(held.document.payload);
        return job;
      } catch (error) {
        // Ends the hold in one write: the update, the release and the mark, for one hour.
        return quarantine(`payload does not parse: ${String(error)}`, {
          until: new Date(Date.now() + 3_600_000),
          update: { $set: { state: 'failed', error: String(error) } },
          value: 'quarantined',
        });
      }
    });
    console.log('job-1:', outcome);

    // Every acquisition of job-1 is now refused at once (waiting too), with the reason.
    try {
      await lock.acquire({ _id: 'job-1' }, { wait: 2000 });
    } catch (error) {
      if (!isLockError(error, 'Quarantined')) throw error;
      console.log(`refused: ${error.subtype}`);
    }
    console.log('quarantined:', (await lock.inspect({ _id: 'job-1' })).quarantine?.reason);

    // A filter that matches several documents skips it: the first one free and not quarantined.
    const next = await lock.acquire({ _id: { $in: ['job-1', 'job-2'] } });
    const tookJob2 = (await lock.inspect({ _id: 'job-2' })).locks[0]?.id === next.id;
    await next.release();

    // An operator who fixed the payload lets it be picked again (or: npx monglock release --doc job-1 --quarantine).
    await jobs.updateOne({ _id: 'job-1' }, { $set: { payload: '{"n":1}', state: 'queued' } });
    const cleared = await lock.clearQuarantine({ _id: 'job-1' }); // true: a mark was removed
    // #endregion
    console.log('cleared:', cleared);
    const again = await lock.acquire({ _id: 'job-1' });
    await again.release();
    if (outcome !== 'quarantined' || !cleared || !tookJob2 || (await jobs.findOne({ _id: 'job-2' }))?.state !== 'queued') throw new Error('unexpected');
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
