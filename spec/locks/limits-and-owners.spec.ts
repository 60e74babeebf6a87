/**
 * Limits under convert, and an owner's first hold on a busy shared tag (found by an independent review; each test failed before its fix).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf } from '../support/fixture';

const otherClientsCollection = async (collection: Collection<Document>): Promise<Collection<Document>> =>
  (await newClient()).db(collection.dbName).collection(collection.collectionName);

describe('limits under convert; an owner on a busy shared tag', () => {
  it('convert to a limited tag whose stored limit is another is refused LimitMismatch (a deployment error), as an acquisition is', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const mine = multiLock({ collection, locktimeouts: { read: 60_000, editor: 60_000 }, limits: { editor: 2 } });
    const theirs = multiLock({ collection: await otherClientsCollection(collection), locktimeouts: { read: 60_000, editor: 60_000 }, limits: { editor: 3 } });
    const editor = await theirs.acquire({ _id: 'doc' }, { tag: 'editor' }); // stores limit 3
    expect((await rejectionOf(mine.acquire({ _id: 'doc' }, { tag: 'editor' }))).subtype, 'an acquisition says so').to.equal('LimitMismatch');
    const reader = await mine.acquire({ _id: 'doc' }, { tag: 'read' });
    const refused = await rejectionOf(reader.convert('editor'));
    expect(refused.subtype, refused.message).to.equal('LimitMismatch');
    await Promise.all([editor.release(), reader.release()]);
  });

  it('a converted handle reports the permits it holds (as stored)', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const ml = multiLock({ collection, locktimeouts: { read: 60_000, editor: 60_000 }, limits: { editor: 3 } });
    const handle: LockHandle = await ml.acquire({ _id: 'doc' }, { tag: 'editor', permits: 3 });
    await handle.convert('read');
    await handle.convert('editor');
    const doc = await collection.findOne({ _id: 'doc' as never });
    const stored = (doc?.lock?.tags?.editor as Array<{ id: string; permits: number }>).find((entry) => entry.id === handle.id);
    expect({ stored: stored?.permits, handle: handle.permits, json: handle.toJSON().permits }).to.deep.equal({ stored: 1, handle: 1, json: 1 });
    await handle.release();
  });

  it('an owner\'s read lock is not refused while only readers (compatible with it) come and go', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };
    const readers = multiLock({ collection: await otherClientsCollection(collection), locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const held: LockHandle[] = [];
    // Between the owner's read of the document and its write, another reader takes a read lock
    // (a busy, read-mostly document): nothing that excludes a reader is ever held.
    const busy = delayedCollection(collection, {
      request: (method) => (method === 'findOneAndUpdate' ? readers.acquire({ _id: 'doc' }, { tag: 'read' }).then((h) => held.push(h)) : 0),
    });
    const owned = multiLock({ collection: busy, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const outcome = await owned.acquire({ _id: 'doc' }, { tag: 'read', owner: 'request-1' }).then(
      async (handle) => {
        await handle.release();
        return 'acquired';
      },
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    await Promise.all(held.map((h) => h.release()));
    expect(held.length, 'other readers held the document meanwhile').to.be.greaterThan(0);
    expect(outcome).to.equal('acquired');
  });
});
