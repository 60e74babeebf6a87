/**
 * A look without locking: `inspect(filter)` reads the locks of a document that are live by the
 * server's clock, its fencing counter and its fair-mode waiters, with one read on the primary and
 * no write.
 */
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { multiLock, writeLock } from '../../lib';
import { commandsSentBy, failureOf, freshCollection, rejectionOf, sleep } from '../support/fixture';

describe('inspect(filter): a look without locking', () => {
  it('writeLock: a free document shows no lock; a held one shows the handle\'s lock; one read, nothing written', async () => {
    const collection = await freshCollection([{ _id: 'order-1', total: 5 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const free = await lock.inspect({ _id: 'order-1' });
    expect({ documentId: free.documentId, fence: free.fence, locks: free.locks, waiting: free.waiting }).to.deep.equal({ documentId: 'order-1', fence: 0, locks: [], waiting: [] });

    const handle = await lock.acquire({ _id: 'order-1' });
    const before = await collection.findOne({ _id: 'order-1' as never });
    const { result: seen, commands } = await commandsSentBy(() => lock.inspect({ _id: 'order-1' }));
    expect(commands, 'one read').to.deep.equal(['aggregate']);
    expect(await collection.findOne({ _id: 'order-1' as never }), 'nothing written').to.deep.equal(before);
    expect(seen!.fence).to.equal(handle.fence);
    expect(seen!.locks.map(({ id, tag, expiresAt }) => ({ id, tag, expiresAt: expiresAt?.getTime() }))).to.deep.equal([{ id: handle.id, tag: 'write', expiresAt: handle.expiresAt }]);
    expect(seen!.locks[0]!.acquiredAt.getTime()).to.equal(handle.timestamp);
    expect(seen!.locks[0]!.remaining).to.be.within(1, 60_000);
    expect(seen!.serverTime.getTime(), 'read by the server\'s clock').to.be.within(handle.timestamp, handle.expiresAt);

    await handle.release();
    expect((await lock.inspect({ _id: 'order-1' })).locks).to.deep.equal([]);
  });

  it('an entry whose lease ended (by the server\'s clock) is not shown, though nobody released it', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    await lock.acquire({ _id: 1 });
    await collection.updateOne({ _id: 1 as never }, { $set: { 'lock.tags.write.0.exp': new Date(Date.now() - 60_000) } });
    const seen = await lock.inspect({ _id: 1 });
    expect(seen.locks).to.deep.equal([]);
    expect(seen.fence, 'the fencing counter stays').to.equal(1);
  });

  it('multiLock: readers and an assertive writer registration, oldest first; only the lock\'s own tags', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 60_000, write: 60_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const first = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    await sleep(2);
    const second = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    await sleep(2);
    const writer = (await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'write' }))).lock as { id: string };
    const other = multiLock({ collection, locktimeouts: { audit: 60_000 } });
    await other.acquire({ _id: 'doc' }, { tag: 'audit' });

    const seen = await rw.inspect({ _id: 'doc' });
    expect(seen.locks.map(({ id, tag }) => ({ id, tag }))).to.deep.equal([
      { id: first.id, tag: 'read' },
      { id: second.id, tag: 'read' },
      { id: writer.id, tag: 'write' },
    ]);
    expect((await other.inspect({ _id: 'doc' })).locks.map(({ tag }) => tag)).to.deep.equal(['audit']);
  });

  it('fair mode: the waiters, first in line first, while they wait; none once they are served', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await lock.acquire({ _id: 1 });
    const waiters = [0, 1].map(async (i) => {
      await sleep(100 * i);
      await (await lock.acquire({ _id: 1 }, { wait: 15_000 })).release();
    });
    let seen = await lock.inspect({ _id: 1 });
    for (let i = 0; i < 200 && seen.waiting.length < 2; i++) seen = (await sleep(20), await lock.inspect({ _id: 1 }));
    expect(seen.waiting.map(({ tag }) => tag)).to.deep.equal(['write', 'write']);
    // The stored tickets, first in line first (by when they came, then id), as the queue orders waiters.
    const queue = ((await collection.findOne({ _id: 1 as never }))?.lock?.queue ?? []) as Array<{ id: string; at: Date; exp: Date }>;
    const inLine = queue.filter((t) => t.exp.getTime() > seen.serverTime.getTime()).sort((a, b) => a.at.getTime() - b.at.getTime() || a.id.localeCompare(b.id));
    expect(seen.waiting.map(({ id, since, expiresAt }) => ({ id, since, expiresAt }))).to.deep.equal(inLine.map(({ id, at, exp }) => ({ id, since: at, expiresAt: exp })));
    expect(seen.locks.map(({ id }) => id)).to.deep.equal([holder.id]);
    await holder.release();
    await Promise.all(waiters);
    expect(await lock.inspect({ _id: 1 })).to.include({ fence: 3 }).and.to.have.property('waiting').that.deep.equals([]);
  });

  it('no document: RessourceNotFound (404 under boom); bad input is refused before the read', async () => {
    const collection = await freshCollection();
    expect((await rejectionOf(writeLock({ collection }).inspect({ _id: 'none' }))).subtype).to.equal('RessourceNotFound');
    const boomed = await rejectionOf(writeLock({ collection, boom: Boom }).inspect({ _id: 'none' }));
    expect((boomed as unknown as Boom.Boom).output.statusCode).to.equal(404);
    const { result: typo, commands } = await commandsSentBy(() => failureOf(() => writeLock({ collection }).inspect({ _id: 'none' }, { timeuot: 100 } as never)));
    expect(typo!.message).to.match(/Unknown key `params\.timeuot`.*`timeout`/);
    expect(commands, 'nothing sent').to.deep.equal([]);
    expect((await failureOf(() => writeLock({ collection }).inspect({ _id: 'none' }, { w: 1 } as never))).message).to.match(/writes nothing/);
    expect((await failureOf(() => writeLock({ collection }).inspect({ $where: 'true' }))).name).to.equal('TypeError');
  });
});
