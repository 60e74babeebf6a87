/**
 * Review of issue 31 §1: using() and the handle's lease after a conversion whose reply was lost (it landed).
 */
import { expect } from 'chai';
import { MongoNetworkError, type Collection, type Document } from 'mongodb';
import { multiLock, type LockHandle } from '../../lib';
import { wrapWrites } from '../../stress/server-faults';
import { freshCollection, newClient, sleep } from '../support/fixture';

const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };

const isConversion = (method: string, args: readonly unknown[]): boolean =>
  method === 'findOneAndUpdate' && (args[1] as Document).$inc?.['lock.fence'] === 1 && (args[1] as Document).$pull?.['lock.upgrade'] !== undefined;

function losingReplies(collection: Collection<Document>, lose: (method: string, args: readonly unknown[]) => boolean): Collection<Document> {
  return wrapWrites(collection, async (method, args, _n, send) => {
    const result = await send(args);
    if (lose(method, args)) throw new MongoNetworkError('the reply was lost (simulated)');
    return result;
  });
}

describe('review 31: the lease of a lock whose conversion reply was lost (it landed)', () => {
  it('using(): once another writer holds the document, the body of a lock whose conversion landed (reply lost) has been told, and its handle has no lease left', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let lose = false;
    const lossy = losingReplies(collection, (method, args) => lose && isConversion(method, args));
    const locktimeouts = { read: 10_000, write: 600 };
    const rw = multiLock({ collection: lossy, locktimeouts, lockRelationships: relationships });
    const other = multiLock({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), locktimeouts, lockRelationships: relationships });
    let seen: unknown;
    const outcome = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle, signal) => {
      lose = true;
      const lost = await handle.convert('write').then(
        () => 'converted',
        (error: Error & { subtype?: string }) => error.subtype,
      );
      lose = false;
      // Another process's writer waits for the document; the stored write lock lapses after 600 ms.
      const intruder = await other.acquire({ _id: 'doc' }, { tag: 'write', wait: 5_000 });
      seen = { lost, maybeTag: handle.toJSON().maybeTag, intruderHolds: true, bodyAborted: signal.aborted, remaining: handle.remaining() };
      await intruder.release();
    }).then(
      () => 'resolved',
      (error: Error & { subtype?: string }) => error.subtype,
    );
    expect(outcome, 'using() ends with the lock lost').to.equal('LockNotFound');
    expect(seen, 'while another writer holds, the body was told its lock is lost and the handle relies on no lease').to.deep.equal({
      lost: 'DbError',
      maybeTag: 'write',
      intruderHolds: true,
      bodyAborted: true,
      remaining: 0,
    });
  });

  it('using(): a lock whose conversion landed (reply lost) is kept with the new tag\'s lease once the keeper finds it there, not the old tag\'s', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let lose = false;
    const lossy = losingReplies(collection, (method, args) => lose && isConversion(method, args));
    // The write lease is long enough that the keeper's first extension (at half the read lease) finds it live.
    const rw = multiLock({ collection: lossy, locktimeouts: { read: 1_000, write: 2_500 }, lockRelationships: relationships });
    const leases = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle) => {
      await sleep(3_000); // the body works under the read lock a while (kept by extensions) before it upgrades
      lose = true;
      await handle.convert('write').catch(() => undefined);
      lose = false;
      for (let i = 0; i < 150 && handle.tag !== 'write'; i++) await sleep(20); // the keeper's extension found it under write
      const tagged = handle.expiresAt;
      for (let i = 0; i < 250 && handle.expiresAt === tagged; i++) await sleep(20); // and extended it once more
      const doc = await collection.findOne({ _id: 'doc' as never });
      const entry = (doc?.lock?.tags?.write as Array<{ id: string; exp: Date }> | undefined)?.find((each) => each.id === handle.id);
      return { tag: handle.tag, storedLease: (entry?.exp.getTime() ?? 0) - (doc?.lock?.now as Date).getTime() };
    });
    expect(leases.tag, 'the handle took the tag the lock is under').to.equal('write');
    expect(leases.storedLease, 'the write lock\'s lease as stored after the keeper\'s extension (ms): the write tag\'s 2,500, not the time since the acquisition plus a read lease').to.be.within(1, 2_500);
  });
});
