/**
 * What `status()` and `unlock()` of resource locks read and report: status reads only the
 * resource documents whose `lock.until` has not passed (served by an index `createIndexes()`
 * makes), and neither reports a lock that had already expired.
 */
import { expect } from 'chai';
import type { CommandSucceededEvent, Document } from 'mongodb';
import { resourceLocks } from '../../lib';
import { DB_NAME, freshCollection, newClient, sleep } from '../support/fixture';

/** The documents the server's replies carried to the client (cursor batches of find, aggregate and getMore). */
function shipped(event: CommandSucceededEvent): number {
  const cursor = (event.reply as Document).cursor as { firstBatch?: unknown[]; nextBatch?: unknown[] } | undefined;
  return (cursor?.firstBatch ?? cursor?.nextBatch ?? []).length;
}

describe('resource lock status', () => {
  it('status() reads the documents that may hold a live lock, not every resource that ever held one: 1 held among 300 whose leases ended', async () => {
    const { collectionName } = await freshCollection();
    const client = await newClient({ monitorCommands: true });
    const collection = client.db(DB_NAME).collection(collectionName);
    const locks = resourceLocks({ collection });
    await locks.createIndexes();
    for (let i = 0; i < 300; i++) {
      const lock = await locks.xlock(`old-${i}`, `job-${i}`, { ttl: 1_000 });
      if (i % 2 === 0) await lock.release(); // half released, half left to expire
    }
    const held = await locks.xlock('current', 'job-now', { owner: 'billing', ttl: 60_000 });
    await sleep(1_200); // every old lease (1 s) has ended

    let documents = 0;
    const count = (event: CommandSucceededEvent): void => void (documents += shipped(event));
    client.on('commandSucceeded', count);
    try {
      for (const [who, reader] of [['a client that has not seen the server yet', resourceLocks({ collection })], ['the client that locked', locks]] as const) {
        documents = 0;
        const statuses = await reader.status();
        expect(statuses.map((status) => [status.resource, status.lockId]), who).to.deep.equal([['current', held.lockId]]);
        expect(documents, `${who}: documents shipped to read 1 held lock among 301 resources`).to.be.at.most(2);
      }
    } finally {
      client.off('commandSucceeded', count);
    }
  });

  it('createIndexes() makes the index on lock.until that status reads by (partial: documents that ever held a lock)', async () => {
    const collection = await freshCollection();
    const names = await resourceLocks({ collection }).createIndexes();
    const indexes = await collection.listIndexes().toArray();
    const until = indexes.find((index) => JSON.stringify(index.key) === JSON.stringify({ 'lock.until': 1 }));
    expect(until, `an index on lock.until among ${JSON.stringify(indexes.map((index) => index.key))}`).not.to.equal(undefined);
    expect(names, 'createIndexes() names it').to.include(until?.name);
    expect(until?.partialFilterExpression, 'partial: only documents that ever held a lock').to.deep.equal({ 'lock.until': { $exists: true } });
  });

  it('unlock() resolves the locks it released, not the expired entries it removed (no negative ttl)', async () => {
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    await locks.xlock('lapsed', 'job-1', { ttl: 1_000 });
    await locks.xlock('live', 'job-1', { ttl: 60_000 });
    await locks.slock('forever', 'job-1');
    await sleep(1_200); // the 1 s lease has ended
    const released = await locks.unlock('job-1');
    expect(released.map((status) => status.resource).sort(), 'what unlock reports').to.deep.equal(['forever', 'live']);
    expect(released.find((status) => status.resource === 'forever')?.ttl, 'a lock without expiry: ttl -1').to.equal(-1);
    expect(released.find((status) => status.resource === 'live')?.ttl, 'a live lock: its remaining lease').to.be.within(1, 60_000);
    expect(await collection.countDocuments({ 'lock.tags.exclusive.0': { $exists: true } }), 'the expired entry is removed all the same').to.equal(0);
  });
});
