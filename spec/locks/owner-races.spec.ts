/**
 * An owner's first hold taken unpinned (lib/engine/owned-acquisition.ts, UNPINNED_FROM), under races with its other processes and a store outage (found by an independent review; each test failed before its fix).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf } from '../support/fixture';

const otherClientsCollection = async (collection: Collection<Document>): Promise<Collection<Document>> =>
  (await newClient()).db(collection.dbName).collection(collection.collectionName);

const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };
const locktimeouts = { read: 60_000, write: 60_000 };

describe('an owner\'s unpinned first hold', () => {
  it('two processes of one owner never hold one lock under two fencing tokens', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const readers = multiLock({ collection: await otherClientsCollection(collection), locktimeouts, lockRelationships: relationships });
    const processA = multiLock({ collection: await otherClientsCollection(collection), locktimeouts, lockRelationships: relationships });
    const held: LockHandle[] = [];
    let handleA: LockHandle | undefined;
    // Process B is on a busy, read-mostly document: before each of its first two writes another
    // reader comes (its pinned first hold is refused: the counter moved), and before its third
    // (unpinned) write, process A of the same owner takes its first hold (A's read came after B's).
    const busy = delayedCollection(collection, {
      request: (method, n) => {
        if (method !== 'findOneAndUpdate') return undefined;
        if (n <= 2) return readers.acquire({ _id: 'doc' }, { tag: 'read' }).then((h) => held.push(h));
        if (n === 3) return processA.acquire({ _id: 'doc' }, { tag: 'read', owner: 'job-7' }).then((h) => (handleA = h));
        return undefined;
      },
    });
    const processB = multiLock({ collection: busy, locktimeouts, lockRelationships: relationships });
    const handleB = await processB.acquire({ _id: 'doc' }, { tag: 'read', owner: 'job-7' });
    expect(handleA, 'process A took its hold').to.not.equal(undefined);
    const doc = await collection.findOne({ _id: 'doc' as never });
    const owned = (doc?.lock?.tags?.read as Array<{ owner?: string; fence?: number }>).filter((entry) => entry.owner === 'job-7');
    await Promise.all([...held, handleA!, handleB].map((h) => h.release()));
    // Every hold of an owner keeps the fencing token of its first (docs/api.md, Reentrancy).
    expect({ handles: new Set([handleA!.fence, handleB.fence]).size, stored: new Set(owned.map((e) => e.fence)).size }).to.deep.equal({ handles: 1, stored: 1 });
  });

  it('while the owner holds the lock, its acquisition (no wait) nests at once: not LockNotFound because its first hold\'s token is still being set', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const readers = multiLock({ collection: await otherClientsCollection(collection), locktimeouts, lockRelationships: relationships });
    const held: LockHandle[] = [];
    let releaseFence!: () => void;
    const fenceSent = new Promise<void>((resolve) => (releaseFence = resolve));
    let fenceUpdateStarted!: () => void;
    const fenceUpdateReached = new Promise<void>((resolve) => (fenceUpdateStarted = resolve));
    // Process A on a busy document: its first hold is taken unpinned (third try), and the update
    // that sets its token is slow on the way to the server.
    const busy = delayedCollection(collection, {
      request: (method, n) => {
        if (method === 'findOneAndUpdate' && n <= 2) return readers.acquire({ _id: 'doc' }, { tag: 'read' }).then((h) => held.push(h));
        if (method === 'updateOne') {
          fenceUpdateStarted();
          return fenceSent;
        }
        return undefined;
      },
    });
    const processA = multiLock({ collection: busy, locktimeouts, lockRelationships: relationships });
    const processB = multiLock({ collection: await otherClientsCollection(collection), locktimeouts, lockRelationships: relationships });
    const first = processA.acquire({ _id: 'doc' }, { tag: 'read', owner: 'job-8' });
    await fenceUpdateReached;
    // The owner holds the lock (its entry is live, and its acquisition will resolve); another
    // acquisition by the same owner "succeeds at once as a nested hold" (docs/api.md, Reentrancy):
    const nested = processB.acquire({ _id: 'doc' }, { tag: 'read', owner: 'job-8' }).then(
      (handle) => ({ handle, error: undefined }),
      (error: Error & { subtype?: string }) => ({ handle: undefined, error }),
    );
    setTimeout(releaseFence, 300);
    const [outer, inner] = await Promise.all([first, nested]);
    await Promise.all([...held, outer, ...(inner.handle ? [inner.handle] : [])].map((h) => h.release()));
    expect(inner.error && `${inner.error.subtype}: ${inner.error.message}`, 'the nested acquisition').to.equal(undefined);
    expect(inner.handle?.fence).to.equal(outer.fence);
  });

  it('an owner\'s first hold whose token could not be set during a short outage is not left held (nor without err.lock)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const readers = multiLock({ collection: await otherClientsCollection(collection), locktimeouts, lockRelationships: relationships });
    const held: LockHandle[] = [];
    // A busy document (the first hold is taken unpinned), then a short outage: the update that sets
    // its token and the release that follows fail before reaching the server; MongoDB is back at once.
    const busy = delayedCollection(collection, {
      request: (method, n) => {
        if (method === 'findOneAndUpdate' && n <= 2) return readers.acquire({ _id: 'doc' }, { tag: 'read' }).then((h) => held.push(h));
        if (method === 'updateOne' && n <= 2) return Promise.reject(new Error('connection reset (simulated)'));
        return undefined;
      },
    });
    const owned = multiLock({ collection: busy, locktimeouts, lockRelationships: relationships });
    const error = await rejectionOf(owned.acquire({ _id: 'doc' }, { tag: 'read', owner: 'job-9' }));
    await Promise.all(held.map((h) => h.release()));
    // A lost acquisition reply is released once MongoDB answers again (after 1 s, 3 s): wait past that.
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    const doc = await collection.findOne({ _id: 'doc' as never });
    const leftover = ((doc?.lock?.tags?.read ?? []) as Array<{ owner?: string; exp: Date }>).filter((entry) => entry.owner === 'job-9' && entry.exp.getTime() > Date.now());
    expect(error.subtype, error.message).to.equal('DbError');
    // Either the library released the hold, or it handed it to the caller (err.lock) to release.
    expect({ leftoverHolds: leftover.length, handedOver: error.lock !== undefined }).to.not.deep.equal({ leftoverHolds: 1, handedOver: false });
  });
});
