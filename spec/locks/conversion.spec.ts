/**
 * handle.convert(tag): a held multiLock lock becomes a lock of another tag in one atomic update
 * (upgrade, downgrade); a waiting upgrade has writer preference; two upgrades never wait for each
 * other.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, writeLock, type LockHandle } from '../../lib';
import { failureOf, freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

const readWrite = (collection: Collection<Document>, lease = 60_000) =>
  multiLock({
    collection,
    locktimeouts: { read: lease, write: lease },
    lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
  });

/** The ids of the entries of `tag` in document `_id`. */
async function idsOf(collection: Collection<Document>, _id: unknown, tag: string): Promise<string[]> {
  const doc = await collection.findOne({ _id: _id as never });
  return ((doc?.lock?.tags?.[tag] ?? []) as Array<{ id: string }>).map((entry) => entry.id);
}

describe('handle.convert(tag): upgrade and downgrade in one update', () => {
  it('read → write → read: the same lock (id), a new token each time; others see a writer, then readers are admitted again', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const { id, fence } = handle;
    expect(await handle.convert('write')).to.equal(handle);
    expect({ id: handle.id, tag: handle.tag }).to.deep.equal({ id, tag: 'write' });
    expect(handle.fence).to.be.greaterThan(fence);
    expect({ read: await idsOf(collection, 'doc', 'read'), write: await idsOf(collection, 'doc', 'write') }).to.deep.equal({ read: [], write: [id] });
    expect((await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'read' }))).subtype).to.equal('CooperativeLock');
    expect((await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');

    const writeFence = handle.fence;
    await handle.convert('read');
    expect(handle.tag).to.equal('read');
    expect(handle.fence).to.be.greaterThan(writeFence);
    const other = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    await other.release();
    await handle.release();
    expect({ read: await idsOf(collection, 'doc', 'read'), write: await idsOf(collection, 'doc', 'write') }).to.deep.equal({ read: [], write: [] });
  });

  it('at no instant is the document free: a writer trying all along never gets in while a holder converts back and forth', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const other = readWrite((await newClient()).db(collection.dbName).collection(collection.collectionName));
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    let converting = true;
    let intruders = 0;
    let attempts = 0;
    const competitor = (async () => {
      while (converting) {
        attempts++;
        const got = await other.acquire({ _id: 'doc' }, { tag: 'write' }).catch(async (error: { lock?: LockHandle }) => {
          await error.lock?.release(); // a writer registered beside the reader (assertive) gives up
          return undefined;
        });
        if (got) {
          intruders++;
          await got.release();
        }
      }
    })();
    try {
      for (let i = 0; i < 20; i++) {
        // A competitor's registration (waiting for this reader) may be there for a moment: UpgradeConflict, try again.
        for (let tries = 0; ; tries++) {
          const refused = await handle.convert('write', { wait: 10_000 }).then(
            () => undefined,
            (error: { subtype?: string }) => error,
          );
          if (refused === undefined) break;
          if ((refused as { subtype?: string }).subtype !== 'UpgradeConflict' || tries > 50) throw refused;
          await sleep(5);
        }
        await handle.convert('read');
      }
    } finally {
      converting = false;
      await competitor;
    }
    await handle.release();
    expect(attempts).to.be.greaterThan(0);
    expect(intruders).to.equal(0);
  });

  it('a waiting upgrade has writer preference: new readers are refused while it waits; it completes once the other readers are gone', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const upgrader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    expect((await rejectionOf(upgrader.convert('write'))).message, 'without wait: refused at once').to.match(/tag read is held by others/);
    const upgrade = upgrader.convert('write', { wait: 10_000 });
    for (let i = 0; i < 100 && ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length === 0; i++) await sleep(20);
    const seen = await rw.inspect({ _id: 'doc' });
    expect({ lockId: seen.upgrade?.lockId, tag: seen.upgrade?.tag }).to.deep.equal({ lockId: upgrader.id, tag: 'write' });
    const newcomer = await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'read' }));
    expect(newcomer.subtype).to.equal('CooperativeLock');
    expect(newcomer.message).to.match(/upgrade to write is pending \(writer preference\)/);
    await reader.release();
    await upgrade;
    expect(upgrader.tag).to.equal('write');
    expect((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade, 'the mark is gone').to.deep.equal([]);
    await upgrader.release();
  });

  it('two readers upgrading at once: the second is refused at once (UpgradeConflict), never a deadlock; the first completes once it lets go', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const first = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const second = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const upgrade = first.convert('write', { wait: 10_000 });
    for (let i = 0; i < 100 && ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length === 0; i++) await sleep(20);
    const refused = await rejectionOf(second.convert('write', { wait: 10_000 }));
    expect(refused.subtype).to.equal('UpgradeConflict');
    expect(refused.message).to.match(/would wait for each other/);
    expect(second.tag, 'still a reader').to.equal('read');
    await second.release();
    await upgrade;
    expect(first.tag).to.equal('write');
    await first.release();
  });

  it('a reader whose upgrade would wait for a writer registered beside it (which waits for the reader) is refused at once: UpgradeConflict', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const writer = rw.acquire({ _id: 'doc' }, { tag: 'write', wait: 10_000 }); // registers, waits for the reader
    for (let i = 0; i < 100 && (await idsOf(collection, 'doc', 'write')).length === 0; i++) await sleep(20);
    const refused = await rejectionOf(reader.convert('write', { wait: 10_000 }));
    expect(refused.subtype).to.equal('UpgradeConflict');
    expect(refused.message).to.match(/registered beside this read lock waits for it/);
    await reader.release();
    await (await writer).release();
  });

  it('writer preference for a tag with a limit: while a conversion waits for a permit, new holders of that tag are refused', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const page = multiLock({ collection, locktimeouts: { viewer: 60_000, editor: 60_000 }, limits: { editor: 2 } });
    const editors = [await page.acquire({ _id: 'doc' }, { tag: 'editor' }), await page.acquire({ _id: 'doc' }, { tag: 'editor' })];
    const viewer = await page.acquire({ _id: 'doc' }, { tag: 'viewer' });
    const promoted = viewer.convert('editor', { wait: 10_000 });
    for (let i = 0; i < 100 && ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length === 0; i++) await sleep(20);
    await editors[0]!.release();
    const newcomer = await rejectionOf(page.acquire({ _id: 'doc' }, { tag: 'editor' }));
    // Refused: while the conversion waits (writer preference), or once it took the freed permit.
    expect(newcomer.message, 'the freed permit is kept for the waiting conversion').to.match(/upgrade to editor is pending|2 of 2 permits/);
    await promoted;
    expect({ tag: viewer.tag, permits: viewer.permits }).to.deep.equal({ tag: 'editor', permits: 1 });
    await Promise.all([viewer.release(), editors[1]!.release()]);
  });

  it('an upgrade that gives up (wait ran out, or aborted) takes its mark out: readers are admitted again once its removal lands', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const upgrader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    // The call rejects without waiting for the mark's removal: it is taken out (not left to lapse) within a round trip or so.
    const markRemoved = async (): Promise<boolean> => {
      for (let i = 0; i < 250 && ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length > 0; i++) await sleep(20);
      return ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length === 0;
    };
    expect((await rejectionOf(upgrader.convert('write', { wait: 500 }))).subtype).to.equal('CooperativeLock');
    expect(upgrader.tag, 'the upgrade that ran out keeps its tag').to.equal('read');
    expect(await markRemoved(), 'the mark of the upgrade that ran out is taken out').to.equal(true);
    await (await rw.acquire({ _id: 'doc' }, { tag: 'read' })).release();
    const aborted = await rejectionOf(upgrader.convert('write', { wait: 10_000, signal: AbortSignal.timeout(300) }));
    expect(aborted.name, 'the aborted upgrade rejects with the signal\'s reason').to.equal('TimeoutError');
    expect(await markRemoved(), 'the mark of the aborted upgrade is taken out').to.equal(true);
    await (await rw.acquire({ _id: 'doc' }, { tag: 'read' })).release();
    await Promise.all([upgrader.release(), reader.release()]);
  });

  it('a signal already aborted: convert sends nothing and rejects with its reason, with or without wait', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = readWrite(collection);
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const fence = async (): Promise<number> => (await collection.findOne({ _id: 'doc' as never }))?.lock?.fence as number;
    const before = await fence();
    const reason = new Error('the caller gave up before');
    const outcomes: string[] = [];
    for (const wait of [0, 5_000]) {
      outcomes.push(await handle.convert('write', { wait, signal: AbortSignal.abort(reason) }).then(() => 'converted', (error: unknown) => (error === reason ? 'the reason' : String(error))));
    }
    const facts = { outcomes, tag: handle.tag, read: await idsOf(collection, 'doc', 'read'), write: await idsOf(collection, 'doc', 'write'), fenceMoved: (await fence()) - before };
    await handle.release();
    expect(facts, 'rejected with the reason, nothing written').to.deep.equal({ outcomes: ['the reason', 'the reason'], tag: 'read', read: [handle.id], write: [], fenceMoved: 0 });
  });

  it('a write guarded by the old lock cannot land after the conversion; the converted handle\'s guard can', async () => {
    const collection = await freshCollection([{ _id: 'doc', n: 0 }]);
    const rw = readWrite(collection);
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const before = handle.guard();
    await handle.convert('write');
    expect((await collection.updateOne(before, { $inc: { n: 1 } })).matchedCount).to.equal(0);
    expect((await collection.updateOne(handle.guard(), { $inc: { n: 1 } })).matchedCount).to.equal(1);
    await handle.release();
  });

  it('using(): the kept lease follows the converted lock', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc', n: 0 }]);
    const rw = readWrite(collection, 400);
    const result = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle, signal) => {
      await handle.convert('write');
      await sleep(1_200); // three leases: extended by the keeper, as a write lock
      if (signal.aborted) throw signal.reason;
      return (await collection.updateOne(handle.guard(), { $inc: { n: 1 } })).matchedCount;
    });
    expect(result).to.equal(1);
    expect({ read: await idsOf(collection, 'doc', 'read'), write: await idsOf(collection, 'doc', 'write') }).to.deep.equal({ read: [], write: [] });
  });

  it('using(): once converted, the lock is extended by the new tag\'s lease, not by the lease it was acquired with', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 30_000, write: 600 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const leases = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle) => {
      await handle.convert('write');
      const converted = handle.expiresAt;
      for (let i = 0; i < 250 && handle.expiresAt === converted; i++) await sleep(20); // until the keeper extended it
      const doc = await collection.findOne({ _id: 'doc' as never });
      const entry = (doc?.lock?.tags?.write as Array<{ id: string; exp: Date }>).find((each) => each.id === handle.id);
      return { extended: handle.expiresAt !== converted, storedLease: (entry?.exp.getTime() ?? 0) - (doc?.lock?.now as Date).getTime() };
    });
    expect(leases.extended, 'the keeper extended the converted lock').to.equal(true);
    expect(leases.storedLease, 'the write lock\'s lease as stored after the extension, from the server\'s clock then (ms): the write tag\'s 600, not the read tag\'s 30,000').to.be.within(1, 600);
  });

  it('bad conversions are refused: a lost lock (LockNotFound), a writeLock\'s handle, the same or an unknown tag, unknown keys, a reentrant hold', async () => {
    const collection = await freshCollection([{ _id: 'doc' }, { _id: 'other' }]);
    const rw = readWrite(collection, 300);
    const lost = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    await sleep(500);
    expect((await rejectionOf(lost.convert('write'))).subtype).to.equal('LockNotFound');
    const handle = await rw.acquire({ _id: 'other' }, { tag: 'read', locktimeout: 60_000 });
    expect(await failureOf(() => handle.convert('read'))).to.be.instanceOf(TypeError);
    expect((await failureOf(() => handle.convert('wirte'))).message).to.match(/Unknown tag `wirte`/);
    expect((await failureOf(() => handle.convert('write', { wiat: 100 } as never))).message).to.match(/wiat.*wait/);
    const owned = await rw.acquire({ _id: 'other' }, { tag: 'read', owner: 'o', locktimeout: 60_000 });
    expect((await failureOf(() => owned.convert('write'))).message).to.match(/reentrant hold cannot be converted/);
    expect(await idsOf(collection, 'other', 'read')).to.have.length(2);
    const plain = await writeLock({ collection }).acquire({ _id: 'doc' });
    expect((await failureOf(() => plain.convert('read'))).message).to.match(/Unknown tag|multiLock/);
    await Promise.all([handle.release(), owned.release(), plain.release()]);
  });
});
