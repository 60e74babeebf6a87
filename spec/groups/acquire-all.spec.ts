/**
 * acquireAll: several documents (any collections, any lock kind of this package), all or nothing,
 * in one canonical order, never waiting while holding part of the set.
 */
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { ObjectId } from 'mongodb';
import { acquireAll, LockGroup, multiLock, semaphore, writeLock } from '../../lib';
import { commandsSentBy, failureOf, freshCollection, rejectionOf, sleep, snapshotOf } from '../support/fixture';

/** The live lock ids in each document of `collection`, by `_id`. */
async function heldIn(collection: import('mongodb').Collection): Promise<Record<string, number>> {
  const docs = await collection.find().toArray();
  const now = Date.now();
  return Object.fromEntries(
    docs.map((doc) => {
      const tags = (doc.lock?.tags ?? {}) as Record<string, Array<{ exp: Date }>>;
      const live = Object.values(tags).flat().filter((entry) => entry.exp.getTime() > now - 5_000).length;
      return [String(doc._id), live];
    }),
  );
}

describe('acquireAll(requests, params): several documents, all or nothing', function () {
  this.timeout(30_000);

  it('resolves the handles in the order of the requests, each holding its own document, and locks in canonical order whatever that order', async () => {
    const accounts = await freshCollection([{ _id: 'a' }, { _id: 'b' }, { _id: 'c' }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const { result: group, commands } = await commandsSentBy(() => acquireAll([{ lock, filter: { _id: 'c' } }, { lock, filter: { _id: 'a' } }, { lock, filter: { _id: 'b' } }]));
    expect(group).to.be.instanceOf(LockGroup);
    expect(group!.length).to.equal(3);
    expect(commands, 'no read for filters that name an _id: one findAndModify per document').to.deep.equal(['findAndModify', 'findAndModify', 'findAndModify']);
    const [c, a, b] = group!;
    for (const [handle, id] of [[c, 'c'], [a, 'a'], [b, 'b']] as const) {
      expect((await accounts.findOne({ _id: id as never }))!.lock.tags.write[0].id).to.equal(handle!.id);
    }
    expect(a!.timestamp, 'the first document in canonical order is locked first').to.be.at.most(Math.min(b!.timestamp, c!.timestamp));
    expect(group!.remaining()).to.be.greaterThan(50_000);
    expect(group!.expiresAt).to.equal(Math.min(a!.expiresAt, b!.expiresAt, c!.expiresAt));
    expect(JSON.parse(JSON.stringify(group))).to.deep.equal([c!.toJSON(), a!.toJSON(), b!.toJSON()]);
    await group!.release();
    expect(await heldIn(accounts)).to.deep.equal({ a: 0, b: 0, c: 0 });
  });

  it('refused with wait 0 because one document is held: rejects with that request named, every other document of the set unlocked', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const other = await lock.acquire({ _id: 2 });
    const refused = await rejectionOf(acquireAll([{ lock, filter: { _id: 3 } }, { lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }]));
    expect(refused.subtype).to.equal('LockAlreadyTaken');
    expect(refused.request).to.equal(2);
    expect(refused.message).to.match(/^requests\[2\] \(monglock_spec\.c_\w+\): LockAlreadyTaken/);
    expect(await heldIn(accounts)).to.deep.equal({ 1: 0, 2: 1, 3: 0 });
    const boomed = await rejectionOf(acquireAll([{ lock: writeLock({ collection: accounts, boom: Boom }), filter: { _id: 2 } }]));
    expect((boomed as unknown as Boom.Boom).output.statusCode).to.equal(409);
    expect(boomed.request).to.equal(0);
    await other.release();
  });

  it('mixes collections and kinds: a writeLock, a multiLock tag and a semaphore permit; ids of several BSON types sort alike in every process', async () => {
    const orders = await freshCollection([{ _id: new ObjectId() }]);
    const items = await freshCollection([{ _id: 7 }, { _id: 'seven' }]);
    const order = writeLock({ collection: orders });
    const stock = multiLock({ collection: items, locktimeouts: { read: 5_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['read', 'write'] } } });
    const quota = semaphore({ collection: items, field: 'quota', limit: 2 });
    const orderId = (await orders.findOne())!._id;
    const group = await acquireAll([
      { lock: stock, filter: { _id: 'seven' }, tag: 'read' },
      { lock: quota, filter: { _id: 7 }, permits: 2 },
      { lock: order, filter: { _id: orderId } },
      { lock: stock, filter: { _id: 7 }, tag: 'write' },
    ]);
    expect(group.map((handle) => handle.tag)).to.deep.equal(['read', 'permit', 'write', 'write']);
    expect(group[1]!.permits).to.equal(2);
    expect((await rejectionOf(quota.acquire({ _id: 7 }))).subtype).to.equal('SemaphoreFull');
    expect((await rejectionOf(stock.acquire({ _id: 'seven' }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');
    await group.release();
    await (await quota.acquire({ _id: 7 }, { permits: 2 })).release();
  });

  it('a filter that is not an _id is read first: none matching is RessourceNotFound, several a TypeError, the same document twice a TypeError, all before anything is locked', async () => {
    const accounts = await freshCollection([{ _id: 1, owner: 'ann' }, { _id: 2, owner: 'bob' }, { _id: 3, owner: 'bob' }]);
    const lock = writeLock({ collection: accounts });
    const before = await snapshotOf(accounts);
    const missing = await rejectionOf(acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { owner: 'cid' } }]));
    expect(missing.subtype).to.equal('RessourceNotFound');
    expect(missing.request).to.equal(1);
    const several = await rejectionOf(acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { owner: 'bob' } }]));
    expect(several).to.be.instanceOf(TypeError);
    expect(several.message).to.match(/requests\[1\]\.filter.*selects several/);
    const twice = await rejectionOf(acquireAll([{ lock, filter: { owner: 'ann' } }, { lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }]));
    expect(twice.message).to.match(/requests\[0\]` and `requests\[2\]` select the same document/);
    // An `_id` by operator or regular expression is a filter like any other: read first.
    expect((await rejectionOf(acquireAll([{ lock, filter: { _id: { $in: [2, 3] } } }]))).message).to.match(/selects several/);
    expect((await rejectionOf(acquireAll([{ lock, filter: { _id: /^x/ } }]))).subtype).to.equal('RessourceNotFound');
    expect(await snapshotOf(accounts), 'nothing was written').to.equal(before);

    const [ann] = await acquireAll([{ lock, filter: { owner: 'ann' } }]);
    expect((await accounts.findOne({ _id: 1 as never }))!.lock.tags.write[0].id).to.equal(ann!.id);
    await ann!.release();
  });

  it('refuses bad input before anything is read or written, naming the key (a typo never loosens a lock)', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts });
    const tags = multiLock({ collection: accounts, locktimeouts: { read: 1_000 } });
    const before = await snapshotOf(accounts);
    const cases: Array<[() => unknown, RegExp]> = [
      [() => acquireAll([{ lock, filter: { _id: 1 } }], { wiat: 100 } as never), /Unknown key `params.wiat`. Did you mean `wait`\?/],
      [() => acquireAll([{ lock, filter: { _id: 1 } }], { tag: 'x' } as never), /`params.tag`: each request names its own/],
      [() => acquireAll([{ lock, filter: { _id: 1 }, wait: 5 } as never]), /`requests\[0\].wait`: waiting is for the whole group/],
      [() => acquireAll([{ lock, fitler: { _id: 1 } } as never]), /Unknown key `requests\[0\].fitler`. Did you mean `filter`\?/],
      [() => acquireAll([{ lock: { acquire() {} }, filter: { _id: 1 } } as never]), /requests\[0\].lock` to be a writeLock, multiLock or semaphore/],
      [() => acquireAll([{ lock: tags, filter: { _id: 1 } }]), /requests\[0\].tag/],
      [() => acquireAll([{ lock, filter: { _id: 1 }, tag: 'read' }]), /Expected no `requests\[0\].tag`/],
      [() => acquireAll([{ lock, filter: { _id: 1 }, permits: 2 }]), /Expected no `requests\[0\].permits`/],
      [() => acquireAll({ lock, filter: { _id: 1 } } as never), /`requests` to be an array/],
      [() => acquireAll([{ lock, filter: { _id: 1 } }], { locktimeout: -1 }), /params.locktimeout/],
      [() => acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 1 } }]), /same document/],
    ];
    for (const [call, message] of cases) expect((await failureOf(call)).message).to.match(message);
    expect(await snapshotOf(accounts)).to.equal(before);
  });

  it('with wait: never waits holding part of the set; wins once the refusing holder lets go', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const holder = await lock.acquire({ _id: 2 });
    const pending = acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }, { lock, filter: { _id: 3 } }], { wait: 10_000 });
    await sleep(300);
    // While it waits for 2, it holds neither 1 nor 3: anyone may take them. (Between two pauses it
    // tries 1 again, holding it for a round trip: a third party waits that long at most.)
    const [one, three] = [await lock.acquire({ _id: 1 }, { wait: 5_000 }), await lock.acquire({ _id: 3 }, { wait: 5_000 })];
    await Promise.all([one.release(), three.release()]);
    await holder.release();
    const group = await pending;
    expect(await heldIn(accounts)).to.deep.equal({ 1: 1, 2: 1, 3: 1 });
    expect(group[1]!.fence, 'taken after the holder let go').to.be.greaterThan(holder.fence);
    await group.release();
  });

  it('with wait, running out: rejects with the refusal, naming its request, holding nothing', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const holder = await lock.acquire({ _id: 2 });
    const refused = await rejectionOf(acquireAll([{ lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }], { wait: 300 }));
    expect(refused.subtype).to.equal('LockAlreadyTaken');
    expect(refused.request).to.equal(0);
    expect(await heldIn(accounts)).to.deep.equal({ 1: 0, 2: 1 });
    await holder.release();
  });

  it('with wait, a missing document is RessourceNotFound soon, not when the wait runs out, whichever its place in the order', async () => {
    const accounts = await freshCollection([{ _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    for (const requests of [[{ lock, filter: { _id: 2 } }, { lock, filter: { _id: 3 } }], [{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }]]) {
      const started = Date.now();
      const missing = await rejectionOf(acquireAll(requests, { wait: 30_000 }));
      expect(missing.subtype).to.equal('RessourceNotFound');
      expect(Date.now() - started, 'long before the wait ran out').to.be.below(10_000);
      expect(await heldIn(accounts)).to.deep.equal({ 2: 0 });
    }
  });

  it('an abort while it waits rejects with the reason, holding nothing', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const holder = await lock.acquire({ _id: 2 });
    const controller = new AbortController();
    const pending = acquireAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], { wait: 20_000, signal: controller.signal });
    await sleep(200);
    const reason = new Error('client gone');
    controller.abort(reason);
    expect(await rejectionOf(pending)).to.equal(reason);
    expect(await heldIn(accounts)).to.deep.equal({ 1: 0, 2: 1 });
    await holder.release();
    const aborted = AbortSignal.abort(new Error('before'));
    expect((await rejectionOf(acquireAll([{ lock, filter: { _id: 1 } }], { signal: aborted }))).message).to.equal('before');
  });

  it('extend() pushes every lease; release() releases every member, and names a member that was lost', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 2_000 });
    const group = await acquireAll([{ lock, filter: { _id: 2 } }, { lock, filter: { _id: 1 } }], { locktimeout: 1_000 });
    expect(group.remaining()).to.be.at.most(1_000);
    await group.extend(30_000);
    expect(group.remaining()).to.be.greaterThan(20_000);
    await lock.release({ _id: 1 }); // forced: member 1 (request 1) is lost
    const lost = await rejectionOf(group.release());
    expect(lost.subtype).to.equal('LockNotFound');
    expect(lost.request).to.equal(1);
    expect(await heldIn(accounts)).to.deep.equal({ 1: 0, 2: 0 });
  });
});

/**
 * A group refused at a multiLock tag that is assertive over a tag still held: it holds nothing
 * (its registration was released), so its AssertiveLock must not hand back a registration to
 * continue (`err.lock`, "registered; waiting for tag …"): continuing it could only fail. Single
 * `acquire` with `wait` says the same thing truthfully: "still asserting …; released", no lock.
 */
describe('acquireAll: an assertive member refused says it holds nothing', function () {
  this.timeout(30_000);

  for (const wait of [0, 300]) {
    it(`wait ${wait}: AssertiveLock names its request, carries no released registration, and says it was released`, async () => {
      const docs = await freshCollection([{ _id: 1 }, { _id: 2 }]);
      const rw = multiLock({
        collection: docs,
        field: 'rw',
        locktimeouts: { read: 60_000, write: 60_000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      const locks = writeLock({ collection: docs, locktimeout: 60_000 });
      const reader = await rw.acquire({ _id: 2 }, { tag: 'read' });
      const refused = await rejectionOf(acquireAll([{ lock: locks, filter: { _id: 1 } }, { lock: rw, tag: 'write', filter: { _id: 2 } }], { wait }));
      expect(refused.subtype).to.equal('AssertiveLock');
      expect(refused.request).to.equal(1);
      const writers = ((await docs.findOne({ _id: 2 as never }))!.rw.tags.write as unknown[]).length;
      expect(writers, 'the registration was released: the group holds nothing').to.equal(0);
      const continued = refused.lock === undefined ? 'no lock handed back' : await rw.acquire({ _id: 2 }, { tag: 'write', lock: refused.lock as never }).then(() => 'continued', (error: Error & { subtype?: string }) => error.subtype);
      expect(continued, `err.lock of "${refused.message}"`).to.equal('no lock handed back');
      expect(refused.message).not.to.match(/registered; waiting/);
      await reader.release();
    });
  }
});
