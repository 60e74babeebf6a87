/**
 * A lock holder in its own process, for the crash tests: acquires a writeLock on `{ _id: 'crash' }`,
 * prints `{"event":"holding",...}`, then waits. On a line "go" on stdin (after SIGCONT) it tries a
 * guarded write and a release, prints what happened, and exits.
 * Usage: holder.ts <uri> <db> <collection> <leaseMs>
 */
import { createInterface } from 'node:readline';
import { MongoClient } from 'mongodb';
import { isLockError, writeLock } from 'monglock';

async function main(): Promise<void> {
  const [uri, dbName, collectionName, lease] = process.argv.slice(2);
  const client = await MongoClient.connect(uri!);
  const collection = client.db(dbName).collection(collectionName!);
  const lock = writeLock({ collection, locktimeout: Number(lease) });
  const handle = await lock.acquire({ _id: 'crash' });
  console.log(JSON.stringify({ event: 'holding', pid: process.pid, lock: handle }));
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() !== 'go') continue;
    const guarded = await collection.updateOne(handle.guard(), { $set: { writtenBy: 'paused holder' } });
    const release = await handle.release().then(() => 'released', (error: unknown) => (isLockError(error) ? error.subtype : String(error)));
    console.log(JSON.stringify({ event: 'resumed', guardedMatched: guarded.matchedCount, release }));
    break;
  }
  await client.close();
  process.exit(0); // stdin, still open, would keep the process alive
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
