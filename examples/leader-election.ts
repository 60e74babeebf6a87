/** Leader election: three workers campaign for one job; one leads at a time, the others take over when it resigns or dies (docs/api.md: elections). */
import { MongoClient } from 'mongodb';
import { election } from 'monglock';

async function main(): Promise<void> {
  const uri = process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017';
  // Each worker has a client of its own, as separate processes would.
  const first = await MongoClient.connect(uri);
  const clients = [first, await MongoClient.connect(uri), await MongoClient.connect(uri)];
  const jobsOf = (client: MongoClient) => client.db('monglock_examples').collection<{ _id: string; batches?: number }>('elections');
  await jobsOf(first).deleteMany({ _id: 'nightly-billing' });
  const seen: Array<string | undefined> = [];
  const stopWatching = new AbortController();
  try {
    // #region readme
    const electionOf = (client: MongoClient) => election({ collection: jobsOf(client), lease: 2_000 });

    // Anyone may follow who leads: the current state, then each change (undefined: nobody leads).
    const following = (async () => {
      for await (const state of electionOf(first).observe({ _id: 'nightly-billing' }, { signal: stopWatching.signal })) {
        seen.push(state === undefined ? undefined : `${state.value} (token ${state.fence})`);
      }
    })();

    const worker = async (client: MongoClient, name: string): Promise<void> => {
      const term = await electionOf(client).campaign({ _id: 'nightly-billing' }, { value: name }); // waits until it leads
      try {
        for (let batch = 0; batch < 3 && !term.signal.aborted; batch++) {
          // A write only the current leader may make: the guard matches nothing once another leads.
          await jobsOf(client).updateOne(term.guard(), { $inc: { batches: 1 } });
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      } finally {
        await term.resign(); // one write; the next campaigner leads at once
      }
    };
    await Promise.all(clients.map((client, i) => worker(client, `worker ${i + 1}`)));
    // #endregion
    await new Promise((resolve) => setTimeout(resolve, 300));
    stopWatching.abort();
    await following;
    const leaders = seen.filter((state): state is string => state !== undefined);
    const batches = (await jobsOf(first).findOne({ _id: 'nightly-billing' }))?.batches;
    console.log(`leaders in turn: ${leaders.join(', ')}; ${batches} batches written by leaders`);
    // Every worker led once and wrote its 3 batches; observe shows the latest state when it reads, so it may have seen fewer leaders than there were.
    if (batches !== 9 || leaders.length === 0) throw new Error(`unexpected: ${batches} batches, leaders ${leaders.join(', ')}`);
  } finally {
    stopWatching.abort();
    await Promise.all(clients.map((client) => client.close()));
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
