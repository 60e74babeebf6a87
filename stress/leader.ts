/**
 * A leader in its own process, for the election failover specs: campaigns for `{ _id: <name> }`,
 * prints `{"event":"leading",...}`, then waits. On a line "go" on stdin (after SIGCONT) it prints
 * whether its term's signal aborted, tries a guarded write, and exits.
 * Usage: leader.ts <uri> <db> <collection> <name> <leaseMs>
 */
import { createInterface } from 'node:readline';
import { MongoClient } from 'mongodb';
import { election } from 'monglock';

async function main(): Promise<void> {
  const [uri, dbName, collectionName, name, lease] = process.argv.slice(2);
  const client = await MongoClient.connect(uri!);
  const collection = client.db(dbName).collection(collectionName!);
  const term = await election({ collection, lease: Number(lease) }).campaign({ _id: name }, { value: `pid ${process.pid}` });
  console.log(JSON.stringify({ event: 'leading', pid: process.pid, fence: term.fence }));
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() !== 'go') continue;
    // Its timers run first: a term whose lease may have ended while paused aborts at its first one.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const abortedAtFirstTimer = term.signal.aborted;
    const guarded = await collection.updateOne(term.guard(), { $set: { writtenBy: `leader ${term.fence}` } });
    console.log(JSON.stringify({ event: 'resumed', abortedAtFirstTimer, remaining: term.remaining(), guardedMatched: guarded.matchedCount }));
    break;
  }
  await client.close();
  process.exit(0); // stdin, still open, would keep the process alive
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
