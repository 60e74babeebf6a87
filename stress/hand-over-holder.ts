/**
 * A holder and its waiter in one process, for the crash tests: acquires a writeLock on
 * `{ _id: 'crash' }`, starts a waiter for it, and once the waiter sleeps releases, which hands the
 * lock over to the waiter in one write; the hand-over's reply never comes back (held here), so
 * the process is killed with the waiter's lock on the server and its handle never given out.
 * Prints `{"event":"handing",...}` when the hand-over is sent.
 * Usage: hand-over-holder.ts <uri> <db> <collection> <leaseMs>
 */
import * as diagnostics from 'node:diagnostics_channel';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';
import { delayedCollection, isHandOverCall } from './delayed-collection';

async function main(): Promise<void> {
  const [uri, dbName, collectionName, lease] = process.argv.slice(2);
  const client = await MongoClient.connect(uri!);
  const never = new Promise<never>(() => undefined);
  const collection = delayedCollection(client.db(dbName).collection(collectionName!), {
    reply: (method, _n, args) => {
      if (!isHandOverCall(method, args)) return undefined;
      console.log(JSON.stringify({ event: 'handing', pid: process.pid }));
      return never;
    },
  });
  const lock = writeLock({ collection, locktimeout: Number(lease) });
  const holder = await lock.acquire({ _id: 'crash' });
  const waiting = new Promise<void>((resolve) => {
    const listener = (): void => {
      diagnostics.unsubscribe('monglock:wait', listener);
      resolve();
    };
    diagnostics.subscribe('monglock:wait', listener);
  });
  void lock.acquire({ _id: 'crash' }, { wait: 60_000 });
  await waiting;
  await new Promise((resolve) => setImmediate(resolve));
  console.log(JSON.stringify({ event: 'holding', lock: holder }));
  await holder.release(); // never resolves: the hand-over's reply is held back until the process is killed
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
