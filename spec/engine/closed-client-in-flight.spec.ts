/**
 * A client closed while a write awaits its reply: the driver (6.x and 7.x) fails the commands in
 * flight with MongoClientClosedError, and the server may have applied them. Such a failure is
 * never reported as "nothing was sent": a commit proven by a monglock v2 timestamp is not called
 * "not applied", and a resource lock without ttl that landed is handed back (`err.lock`).
 */
import { expect } from 'chai';
import { MongoClient, type Collection, type Document } from 'mongodb';
import { resourceLocks, writeLock } from '../../lib';
import { FaultProxy } from '../../stress/fault-proxy';
import { freshCollection, mongoBackend, sleep } from '../support/fixture';

describe('a write in flight when the client closes', () => {
  let proxy: FaultProxy | undefined;
  afterEach(async () => {
    await proxy?.stop();
    proxy = undefined;
  });

  /** A client of its own through a TCP proxy, on `collection`. */
  async function viaProxy(collection: Collection<Document>): Promise<{ client: MongoClient; collection: Collection<Document>; proxy: FaultProxy }> {
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    proxy = new FaultProxy(hostname, Number(port));
    await proxy.start();
    const client = new MongoClient(proxy.uri(), { serverSelectionTimeoutMS: 2_000 });
    await client.connect();
    return { client, collection: client.db(collection.dbName).collection(collection.collectionName), proxy };
  }

  /** Closes `client` while its commands await replies that `proxy` swallows; resolves once closed. */
  async function closeDuring<T>(client: MongoClient, faults: FaultProxy, pending: Promise<T>): Promise<T> {
    const closing = client.close(); // interrupts the commands in flight at once (MongoClientClosedError)
    const outcome = await pending;
    faults.set({ kind: 'none' }); // the rest of the shutdown (endSessions) gets its replies
    await closing;
    return outcome;
  }

  it('a timestamp-proven commit is not reported "not applied" when the server applied it', async function () {
    this.timeout(20_000);
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const { client, collection, proxy: faults } = await viaProxy(raw);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const handle = await accounts.acquire({ _id: 'acc' });

    // The commit reaches the server; its reply never comes back.
    faults.set({ kind: 'lose-replies' });
    const committing = accounts.release({ _id: 'acc' }, { timestamp: handle.timestamp, update: { $inc: { balance: -30 } } }).then(
      () => 'resolved' as const,
      (error: Error & { data?: { applied?: unknown } }) => error,
    );
    for (let i = 0; i < 200 && (await raw.findOne({ _id: 'acc' as never }))?.balance !== 70; i++) await sleep(25);
    expect((await raw.findOne({ _id: 'acc' as never }))?.balance, 'the commit landed').to.equal(70);

    // The application shuts down while the commit's reply is still awaited.
    const outcome = await closeDuring(client, faults, committing);
    if (outcome !== 'resolved') {
      console.log(`      reported: ${outcome.message} (applied: ${String(outcome.data?.applied)})`);
      expect(outcome.data?.applied, 'the update landed, yet the error says it was not applied').not.to.equal(false);
    }
  });

  it('a resource lock without ttl that landed is not reported as "nothing was sent" without err.lock', async function () {
    this.timeout(20_000);
    const raw = await freshCollection();
    const { client, collection, proxy: faults } = await viaProxy(raw);
    const locks = resourceLocks({ collection });
    await locks.xlock('nightly-report', 'warm-up'); // the resource document exists from now on
    await locks.unlock('warm-up');

    faults.set({ kind: 'lose-replies' });
    const locking = locks.xlock('nightly-report', 'job-7').then(
      () => 'resolved' as const,
      (error: Error & { lock?: unknown }) => error,
    );
    const held = async (): Promise<boolean> => ((await raw.findOne({ _id: 'nightly-report' as never }))?.lock?.tags?.exclusive ?? []).some((entry: { group: string }) => entry.group === 'job-7');
    for (let i = 0; i < 200 && !(await held()); i++) await sleep(25);
    expect(await held(), 'the lock (without expiry) was written').to.equal(true);

    const outcome = await closeDuring(client, faults, locking);
    expect(outcome).not.to.equal('resolved');
    const error = outcome as Error & { lock?: unknown };
    console.log(`      reported: ${error.message} (err.lock: ${error.lock === undefined ? 'none' : 'given'})`);
    expect(await held(), 'held, with no expiry').to.equal(true);
    expect(
      error.lock !== undefined || /may have been written/.test(error.message),
      'a lock without expiry was written, yet the caller hears that nothing was sent and gets nothing to release',
    ).to.equal(true);
  });
});
