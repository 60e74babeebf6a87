/**
 * The driver throws `BSONError` both before sending a command (a value it cannot serialize) and
 * after the command ran (a reply it cannot decode: invalid UTF-8 in a document another driver
 * wrote, with UTF-8 validation on by default). Only the first may say that nothing was written;
 * the second is a lost reply, and the lock it took is the caller's to release (`err.lock`), or the
 * library's. Simulated: the write is applied, then the driver's own `BSONError` is thrown
 * (stress/server-faults.ts).
 */
import { expect } from 'chai';
import { BSON, type Collection, type Document } from 'mongodb';
import { multiLock, writeLock } from '../../lib';
import { failingAfterLanding } from '../../stress/server-faults';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf, sleep, snapshotOf } from '../support/fixture';

const undecodable = (): Error => new BSON.BSONError('Invalid UTF-8 string in BSON document (simulated: the reply of a command that ran)');

/** Live write entries on `_id: 'a'`, by the server's clock (this machine's). */
async function liveEntries(raw: Collection<Document>): Promise<number> {
  const doc = await raw.findOne({ _id: 'a' as never });
  return ((doc?.lock?.tags?.write ?? []) as Array<{ exp: Date }>).filter((entry) => entry.exp.getTime() > realNow()).length;
}

describe('a reply the driver could not decode (BSONError after the command ran)', () => {
  for (const document of [undefined, true] as const) {
    it(`acquire${document ? ' with document' : ''}: DbError with the lock it may hold (err.lock), and that lock is released, not left for its lease`, async function () {
      this.timeout(20_000);
      const raw = await freshCollection([{ _id: 'a', title: 'draft' }]);
      const lock = writeLock({ collection: failingAfterLanding(raw, (method, _args, n) => method === 'findOneAndUpdate' && n === 1, undecodable), locktimeout: 30_000, timeout: 1_000 });
      const error = await rejectionOf(lock.acquire({ _id: 'a' }, document ? { document } : {}));
      expect(error.subtype).to.equal('DbError');
      expect(error.cause, 'the driver error kept').to.be.instanceOf(BSON.BSONError);
      expect(error.message).to.match(/may have been written/);
      expect(error.message).not.to.match(/nothing was written/);
      expect(error.lock, 'err.lock').to.be.an('object');
      expect((await raw.findOne({ _id: 'a' as never }))?.lock?.fence, 'the command landed').to.equal(1);
      const deadline = realNow() + 5_000;
      while ((await liveEntries(raw)) > 0 && realNow() < deadline) await sleep(50);
      expect(await liveEntries(raw), 'released long before its 30 s lease').to.equal(0);
      await (await writeLock({ collection: raw }).acquire({ _id: 'a' })).release();
    });
  }

  it('a conversion (read to write): DbError saying it may have landed, and the handle releases the lock under its new tag', async () => {
    const raw = await freshCollection([{ _id: 'a' }]);
    let failing = false;
    const rw = multiLock({
      collection: failingAfterLanding(raw, (method) => failing && method === 'findOneAndUpdate', undecodable),
      locktimeouts: { read: 30_000, write: 30_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } },
    });
    const handle = await rw.acquire({ _id: 'a' }, { tag: 'read' });
    failing = true;
    const error = await rejectionOf(handle.convert('write'));
    failing = false;
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/may have landed/);
    const doc = await raw.findOne({ _id: 'a' as never });
    expect(((doc?.lock?.tags?.write ?? []) as Array<{ id: string }>).map((entry) => entry.id), 'the conversion landed').to.deep.equal([handle.id]);
    await handle.release();
    const after = await raw.findOne({ _id: 'a' as never });
    const live = ['read', 'write'].flatMap((tag) => ((after?.lock?.tags?.[tag] ?? []) as Array<{ exp: Date }>).filter((entry) => entry.exp.getTime() > realNow()));
    expect(live, 'nothing left held').to.deep.equal([]);
  });

  it('a value the driver cannot serialize (a circular filter) still says nothing was written, and wrote nothing', async () => {
    const raw = await freshCollection([{ _id: 'a', title: 'draft' }]);
    const circular: Record<string, unknown> = { note: 'refers to itself' };
    circular.self = circular;
    const before = await snapshotOf(raw);
    const error = await rejectionOf(writeLock({ collection: raw, locktimeout: 30_000 }).acquire({ _id: 'a', title: { $ne: circular } }));
    expect(error.subtype).to.equal('DbError');
    expect(error.cause, 'the driver error kept').to.be.instanceOf(BSON.BSONError);
    expect(error.message).to.match(/refused the command before sending it: nothing was written/);
    expect(error.lock, 'no lock to release').to.equal(undefined);
    expect(await snapshotOf(raw), 'nothing written').to.equal(before);
  });
});
