import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, LockError, LockHandle, multiLock, writeLock, type MultiLock } from '../../lib';
import { commandsSentBy, freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

const variants = [
  { name: 'without boom', boom: undefined },
  { name: 'with @hapi/boom', boom: Boom },
] as const;

/** The subtype and status of an error in either shape. */
function outcome(error: Error & Record<string, unknown>): string {
  const status = Boom.isBoom(error) ? error.output.statusCode : (error as unknown as LockError).statusCode;
  return `${String(error.subtype)} ${status}`;
}

/** The lock an AssertiveLock error carries: `err.lock`, and with boom `err.data` too. */
function assertedLock(error: Error & Record<string, unknown>, withBoom: boolean): LockHandle {
  expect(error.subtype).to.equal('AssertiveLock');
  if (withBoom) expect((error as unknown as Boom.Boom).data).to.equal(error.lock);
  return error.lock as LockHandle;
}

describe('multiLock', () => {
  for (const variant of variants) {
    describe(`monglock v2 scenarios ${variant.name}`, () => {
      const withBoom = variant.boom !== undefined;
      const make = (collection: Collection<Document>, extra: object): MultiLock =>
        multiLock({ collection, locktimeout: 10_000, boom: variant.boom, ...extra });

      it('cooperative pair', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = make(collection, { lockRelationships: { a: { cooperative: ['b'] }, b: { cooperative: ['a'] } } });
        let a = await lock.acquire({ _id: 1 }, { tag: 'a' });
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'b' })))).to.equal('CooperativeLock 409');
        expect((await collection.findOne({ _id: 1 as never }))?.lock.tags.b).to.equal(undefined);
        await lock.release({ _id: 1 }, { lock: a });
        a = await lock.acquire({ _id: 1 }, { tag: 'a' });
        await lock.release({ _id: 1 }, { lock: a });
        const b = await lock.acquire({ _id: 1 }, { tag: 'b' });
        await lock.release({ _id: 1 }, { lock: b });
      });

      it('assertive flow: register, refuse the cooperative tag meanwhile, continue with { lock }, release', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = make(collection, { lockRelationships: { a: { cooperative: ['b'] }, b: { assertive: ['a'] } } });
        const a = await lock.acquire({ _id: 1 }, { tag: 'a' });
        const bError = await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'b' }));
        expect(outcome(bError)).to.equal('AssertiveLock 409');
        const b = assertedLock(bError, withBoom);
        expect(b).to.include({ tag: 'b' });
        expect(b.id).to.be.a('string');
        expect(b.timestamp).to.be.a('number');
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { lock: b })))).to.equal('AssertiveLock 409');
        await lock.release({ _id: 1 }, { lock: a });
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'a' })))).to.equal('CooperativeLock 409');
        const continued = await lock.acquire({ _id: 1 }, { lock: JSON.parse(JSON.stringify(b)) });
        expect(continued).to.include({ id: b.id, tag: 'b', timestamp: b.timestamp, fence: b.fence });
        await lock.release({ _id: 1 }, { lock: continued });
        const a2 = await lock.acquire({ _id: 1 }, { tag: 'a' });
        expect((await lock.acquire({ _id: 1 }, { lock: a2 })).id).to.equal(a2.id);
      });

      it('a concurrent pair with a third tag cooperative with both', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = make(collection, {
          lockRelationships: { a: { cooperative: ['c'] }, b: { cooperative: ['c'] }, c: { cooperative: ['a', 'b'] } },
        });
        const a = await lock.acquire({ _id: 1 }, { tag: 'a' });
        const b = await lock.acquire({ _id: 1 }, { tag: 'b' });
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'c' })))).to.equal('CooperativeLock 409');
        await lock.release({ _id: 1 }, { lock: a });
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'c' })))).to.equal('CooperativeLock 409');
        await lock.release({ _id: 1 }, { lock: b });
        const c = await lock.acquire({ _id: 1 }, { tag: 'c' });
        await lock.release({ _id: 1 }, { lock: c });
      });

      it('misuse: missing document (404), fabricated lock (409 LockNotFound), DbError with cause', async () => {
        const collection = await freshCollection([{ _id: 1 }, { _id: 2, lock: 7 }]);
        const lock = make(collection, { locktimeouts: { a: 1000 } });
        expect(outcome(await rejectionOf(lock.acquire({ _id: 9 }, { tag: 'a' })))).to.equal('RessourceNotFound 404');
        const fabricated = { id: 'lalalala', tag: 'a' } as never;
        expect(outcome(await rejectionOf(lock.release({ _id: 1 }, { lock: fabricated })))).to.equal('LockNotFound 409');
        expect(outcome(await rejectionOf(lock.release({ _id: 9 }, { lock: fabricated })))).to.equal('RessourceNotFound 404');
        expect(outcome(await rejectionOf(lock.acquire({ _id: 1 }, { lock: fabricated })))).to.equal('LockNotFound 409');
        const dbError = await rejectionOf(lock.acquire({ _id: 2 }, { tag: 'a' }));
        expect(outcome(dbError)).to.equal('DbError 500');
        expect(dbError.cause).to.be.instanceOf(Error);
      });
    });
  }

  it('per-tag leases (100/400/1000 ms) expire in order', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = multiLock({
      collection,
      locktimeouts: { a: 100, b: 400, c: 1000, d: 1000 },
      lockRelationships: { d: { cooperative: ['a', 'b', 'c'] } },
    });
    const started = Date.now();
    await Promise.all((['a', 'b', 'c'] as const).map((tag) => lock.acquire({ _id: 1 }, { tag })));
    const attemptAt = async (ms: number): Promise<string> => {
      await sleep(started + ms - Date.now());
      return lock.acquire({ _id: 1 }, { tag: 'd' }).then(() => 'acquired', (error: LockError) => error.subtype);
    };
    expect(await attemptAt(130)).to.equal('CooperativeLock');
    expect(await attemptAt(430)).to.equal('CooperativeLock');
    expect(await attemptAt(1_100)).to.equal('acquired');
    const tags = (await collection.findOne({ _id: 1 as never }))?.lock.tags;
    expect(tags.a).to.deep.equal([]);
    expect(tags.b).to.deep.equal([]);
    expect(tags.c).to.deep.equal([]);
  });

  describe('bugs monglock v2 had', () => {
    const entry = (msFromNow: number, id: string): Document => ({ id, at: new Date(Date.now() - 60_000), exp: new Date(Date.now() + msFromNow) });

    it('one stale entry of a crashed holder does not make a tag look free while another is live', async () => {
      const collection = await freshCollection([
        { _id: 1, lock: { fence: 2, tags: { write: [entry(-30_000, 'stale'), entry(30_000, 'live')] } } },
        { _id: 2, lock: { fence: 2, tags: { write: [entry(-30_000, 'stale'), entry(30_000, 'live')] } } },
      ]);
      const rw = multiLock({
        collection,
        locktimeouts: { read: 1000, write: 1000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      expect((await rejectionOf(rw.acquire({ _id: 1 }, { tag: 'write' }))).subtype).to.equal('CooperativeLock');
      expect((await rejectionOf(rw.acquire({ _id: 1 }, { tag: 'read' }))).subtype).to.equal('CooperativeLock');
      expect((await rejectionOf(writeLock({ collection }).acquire({ _id: 2 }))).subtype).to.equal('LockAlreadyTaken');
    });

    it('an assertive continuation uses the current time, so a crashed holder\'s lock stops blocking it', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({ collection, locktimeouts: { read: 150, write: 5000 }, lockRelationships: { write: { assertive: ['read'] } } });
      await lock.acquire({ _id: 1 }, { tag: 'read' });
      const registered = (await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'write' }))).lock as LockHandle;
      expect((await rejectionOf(lock.acquire({ _id: 1 }, { lock: registered }))).subtype).to.equal('AssertiveLock');
      await sleep(200);
      expect((await lock.acquire({ _id: 1 }, { lock: registered })).id).to.equal(registered.id);
    });

    it('a continuation whose own lock expired or was released fails with LockNotFound, never a false success', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({ collection, locktimeouts: { read: 5000, write: 100 }, lockRelationships: { write: { assertive: ['read'] } } });
      const reader = await lock.acquire({ _id: 1 }, { tag: 'read' });
      const expiring = (await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'write' }))).lock as LockHandle;
      await lock.release({ _id: 1 }, { lock: reader });
      await sleep(150);
      const expired = await rejectionOf(lock.acquire({ _id: 1 }, { lock: expiring }));
      expect(expired.subtype).to.equal('LockNotFound');
      expect(expired.message).to.match(/expired/);
      await lock.acquire({ _id: 1 }, { tag: 'read' });
      const released = (await rejectionOf(lock.acquire({ _id: 1 }, { tag: 'write', locktimeout: 5000 }))).lock as LockHandle;
      await lock.release({ _id: 1 }, { lock: released });
      expect((await rejectionOf(lock.acquire({ _id: 1 }, { lock: released }))).subtype).to.equal('LockNotFound');
    });

    it('expired entries are pruned by normal writes: 1,000 never-released acquisitions stay within the live ones plus one', async function () {
      this.timeout(120_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({ collection, locktimeouts: { read: 40, audit: 25 } });
      let largest = 0;
      for (let i = 0; i < 1000; i++) {
        // On a loaded machine a reply can come after so short a lease: that acquisition is over (its entry expired).
        const handle = await lock.acquire({ _id: 1 }, { tag: i % 10 === 0 ? 'audit' : 'read' }).catch((error: Error) => {
          if (isLockError(error, 'DbError') && /after the lease/.test(error.message)) return undefined;
          throw error;
        });
        if (!handle) continue;
        const tags = (await collection.findOne({ _id: 1 as never }))?.lock.tags as Record<string, Array<{ exp: Date }>>;
        for (const entries of Object.values(tags)) {
          const live = entries.filter((e) => e.exp.getTime() > handle.timestamp).length;
          expect(entries.length, `after acquisition ${i}`).to.be.at.most(live + 1);
          largest = Math.max(largest, entries.length);
        }
      }
      console.log(`      largest stored array over 1,000 acquisitions: ${largest} entries`);
      expect(largest).to.be.greaterThan(1);
    });

    it('user filters with $or and $and work', async () => {
      const collection = await freshCollection([{ _id: 1, k: 'x' }, { _id: 2, k: 'y' }]);
      const lock = multiLock({ collection, locktimeouts: { a: 1000 }, lockRelationships: { a: { cooperative: ['a'] } } });
      const filter = { $or: [{ k: 'nope' }, { $and: [{ k: 'y' }, { _id: { $gt: 1 } }] }] };
      const handle = await lock.acquire(filter, { tag: 'a' });
      expect((await rejectionOf(lock.acquire({ _id: 2 }, { tag: 'a' }))).subtype).to.equal('CooperativeLock');
      await lock.release(filter, { lock: handle });
    });
  });

  describe('writeLock and multiLock on the same document', () => {
    it('share the stored format: neither destroys the other\'s locks, and relationships to `write` apply', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const exclusive = writeLock({ collection });
      const tagged = multiLock({ collection, locktimeouts: { read: 5000, audit: 5000, write: 5000 }, lockRelationships: { read: { cooperative: ['write'] } } });
      const held = await exclusive.acquire({ _id: 1 });
      expect((await rejectionOf(tagged.acquire({ _id: 1 }, { tag: 'read' }))).subtype).to.equal('CooperativeLock');
      const audit = await tagged.acquire({ _id: 1 }, { tag: 'audit' });
      expect((await rejectionOf(exclusive.acquire({ _id: 1 }))).subtype).to.equal('LockAlreadyTaken');
      await exclusive.release({ _id: 1 }, { lock: held });
      await tagged.release({ _id: 1 }, { lock: audit });
      const read = await tagged.acquire({ _id: 1 }, { tag: 'read' });
      expect(read.fence).to.equal(3);
    });
  });

  describe('round trips (driver command monitoring)', () => {
    it('acquire, assertive registration and continuation = 1 command each; refusal = 2; release = 1', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({
        collection,
        locktimeouts: { read: 5000, write: 5000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      await lock.release({ _id: 1 }, { lock: await lock.acquire({ _id: 1 }, { tag: 'read' }) });
      const read = await commandsSentBy(() => lock.acquire({ _id: 1 }, { tag: 'read' }));
      expect(read.commands).to.deep.equal(['findAndModify']);
      const registered = await commandsSentBy(() => lock.acquire({ _id: 1 }, { tag: 'write' }));
      expect((registered.error as LockError).subtype).to.equal('AssertiveLock');
      expect(registered.commands).to.deep.equal(['findAndModify']);
      const refused = await commandsSentBy(() => lock.acquire({ _id: 1 }, { tag: 'read' }));
      expect((refused.error as LockError).subtype).to.equal('CooperativeLock');
      expect(refused.commands).to.deep.equal(['findAndModify', 'aggregate']);
      const continued = await commandsSentBy(() => lock.acquire({ _id: 1 }, { lock: (registered.error as LockError).lock as LockHandle }));
      expect(continued.commands).to.deep.equal(['findAndModify']);
      const released = await commandsSentBy(() => lock.release({ _id: 1 }, { lock: read.result as LockHandle }));
      expect(released.commands).to.deep.equal(['update']);
      expect((await commandsSentBy(() => lock.acquire({ _id: 1 }, { lock: (registered.error as LockError).lock as LockHandle }))).commands).to.deep.equal([
        'findAndModify',
      ]);
    });
  });

  describe('an assertive registration that still waits', () => {
    // Found by the protocol model (spec/protocol/protocol-model.spec.ts): the expiry is reported first.
    it('whose lease ran out while the tags it asserts over are held: its commit and its continuation are refused LockNotFound; nothing is written', async () => {
      const collection = await freshCollection([{ _id: 'b', balance: 1_000 }]);
      const rw = multiLock({
        collection,
        locktimeouts: { read: 600_000, write: 600_000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      await rw.acquire({ _id: 'b' }, { tag: 'read' });
      const registered = await rejectionOf(rw.acquire({ _id: 'b' }, { tag: 'write' }));
      expect(registered.subtype).to.equal('AssertiveLock');
      const writer = registered.lock as LockHandle;
      // The server's clock passes the registration's lease: its expiry is written a minute into the past.
      await collection.updateOne({ _id: 'b' as never }, { $set: { 'lock.tags.write.$[mine].exp': new Date(Date.now() - 60_000) } }, { arrayFilters: [{ 'mine.id': writer.id }] });

      const committed = await rejectionOf(writer.release({ update: { $inc: { balance: -1 } } }));
      const continued = await rejectionOf(rw.acquire({ _id: 'b' }, { lock: writer }));
      const doc = await collection.findOne({ _id: 'b' as never });
      expect({ commit: committed.subtype, continuation: continued.subtype, balance: doc?.balance }, committed.message).to.deep.equal({
        commit: 'LockNotFound',
        continuation: 'LockNotFound',
        balance: 1_000,
      });
    });

    /** A read/write multiLock, and a write registration that asserts over a held read lock. */
    async function registeredOverReader(): Promise<{ collection: Collection<Document>; rw: MultiLock; reader: LockHandle; registered: LockHandle }> {
      const collection = await freshCollection([{ _id: 'doc' }]);
      const rw = multiLock({
        collection,
        locktimeouts: { read: 10_000, write: 10_000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
      const registration = await rejectionOf(rw.acquire({ _id: 'doc' }, { tag: 'write' }));
      expect(isLockError(registration, 'AssertiveLock')).to.equal(true);
      return { collection, rw, reader, registered: registration.lock as LockHandle };
    }

    it('an extension with an update says AssertiveLock (as a release with that update does), not a refused time stamp', async () => {
      const { collection, reader, registered } = await registeredOverReader();
      const viaRelease = await rejectionOf(registered.release({ update: { $set: { x: 1 } } }));
      expect(isLockError(viaRelease, 'AssertiveLock'), viaRelease.message).to.equal(true);
      const viaExtend = await rejectionOf(registered.extend(undefined, { update: { $set: { x: 1 } } }));
      expect((await collection.findOne({ _id: 'doc' as never }))?.x, 'nothing was applied').to.equal(undefined);
      await reader.release();
      await registered.release();
      expect(viaExtend.message).not.to.match(/time stamp/);
      expect(isLockError(viaExtend, 'AssertiveLock'), viaExtend.message).to.equal(true);
    });

    it('using(filter, { lock }) continues that registration, never silently takes a new lock', async () => {
      const { collection, rw, reader, registered } = await registeredOverReader();
      await reader.release(); // the write lock may now be continued
      let used: string | undefined;
      await rw.using({ _id: 'doc' }, { lock: registered }, (handle) => {
        used = handle.id;
      });
      const left = ((await collection.findOne({ _id: 'doc' as never }))?.lock?.tags?.write ?? []).map((entry: { id: string }) => entry.id);
      expect({ used, left }).to.deep.equal({ used: registered.id, left: [] });
      const mismatch = await rejectionOf(rw.using({ _id: 'doc' }, { tag: 'read', lock: registered }, () => undefined));
      expect(mismatch).to.be.instanceOf(TypeError);
      expect(mismatch.message).to.match(/the tag of `params.lock` \(`write`\)/);
    });

    /*
     * A folded write from an assertive registration. A registration is not a held lock (README,
     * Relationships: call `acquire(filter, { lock })` again "until it resolves: then no unexpired
     * `b` lock remains"), yet the handle `AssertiveLock` carries (`err.lock`, with `document` when
     * asked) takes `release({ update })` and `extend({ update })`. The defect guarded against: they
     * checked only that the entry was present and unexpired, not that the tags it asserts over were
     * gone, so the folded write landed while a holder of an asserted-over tag was in its own
     * read-modify-write, whose commit then overwrote it: a lost update.
     */
    it('release({ update }) of a registration still waiting for the tag it asserts over is refused', async function () {
      this.timeout(15_000);
      const collection = await freshCollection([{ _id: 1, balance: 100 }]);
      const locks = multiLock({
        collection,
        locktimeouts: { x: 5_000, y: 5_000 },
        lockRelationships: { x: { cooperative: ['x'], assertive: ['y'] }, y: { cooperative: ['x', 'y'] } },
      });
      const holder = await locks.acquire({ _id: 1 }, { tag: 'y', document: true }); // reads 100
      const registration = await rejectionOf(locks.acquire({ _id: 1 }, { tag: 'x', document: true }));
      expect(registration.subtype).to.equal('AssertiveLock');
      const pending = registration.lock as LockHandle;
      const folded = await pending.release({ update: { $inc: { balance: -50 } } }).then(
        () => 'applied',
        (error: Error & { subtype?: string }) => `refused: ${error.subtype ?? error.message}`,
      );
      // The holder of y finishes its read-modify-write: 100 - 30.
      await holder.release({ update: { $set: { balance: (holder.document?.balance as number) - 30 } } });
      const balance = (await collection.findOne({ _id: 1 as never }))?.balance;
      console.log(`      the registration's folded write: ${folded}; balance ${balance}`);
      expect(folded, 'a registration that still waits for y is not a lock to write under').to.match(/^refused/);
      expect(balance).to.equal(70);
    });
  });

  describe('validation', () => {
    it('rejects unsafe tags, missing or non-positive leases, assertive cycles and contradictions', async () => {
      const collection = await freshCollection();
      const bad: Array<[object, RegExp]> = [
        [{}, /at least one tag/],
        [{ locktimeouts: { 'a.b': 10 } }, /locktimeouts key/],
        [{ locktimeouts: { $a: 10 } }, /locktimeouts key/],
        [{ locktimeouts: JSON.parse('{"__proto__": 10}') }, /locktimeouts key/],
        [{ locktimeouts: { constructor: 10 } }, /locktimeouts key/],
        [{ locktimeouts: { a: 0 } }, /options.locktimeouts.a/],
        [{ locktimeouts: { a: -1 } }, /options.locktimeouts.a/],
        [{ lockRelationships: { a: {} } }, /Tag `a` has no lease/],
        [{ locktimeouts: { a: 10 }, lockRelationships: { a: { cooperative: ['b'] }, b: {} } }, /Tag `b` in `options.lockRelationships` is not declared/],
        [{ locktimeouts: { a: 10 }, lockRelationships: { a: { cooperative: ['b'] } } }, /Tag `b` in `options.lockRelationships.a.cooperative` is not declared/],
        // A misspelled relationship key would be a tag of its own, leaving `write` unrelated (two writers at once).
        [{ locktimeouts: { read: 10, write: 10 }, locktimeout: 10, lockRelationships: { read: { cooperative: ['write'] }, wirte: { cooperative: ['write', 'read'] } } }, /Tag `wirte` in `options.lockRelationships` is not declared \(did you mean `write`\?\)/],
        [{ locktimeout: 10, lockRelationships: { a: { cooperative: 'b' } } }, /cooperative` to be an array/],
        [{ locktimeout: 10, lockRelationships: { a: { cooperative: ['b.c'] } } }, /cooperative\[0\]/],
        [{ locktimeout: 10, lockRelationships: { a: { assertive: ['a'] } } }, /cycle \(a over a\)/],
        [{ locktimeout: 10, lockRelationships: { a: { assertive: ['b'] }, b: { assertive: ['a'] } } }, /cycle \(a over b over a\)/],
        [{ locktimeout: 10, lockRelationships: { a: { assertive: ['b'] }, b: { assertive: ['c'] }, c: { assertive: ['a'] } } }, /cycle/],
        [{ locktimeout: 10, lockRelationships: { a: { cooperative: ['b'], assertive: ['b'] }, b: {} } }, /both cooperative with and assertive over `b`/],
      ];
      for (const [options, message] of bad) {
        expect(() => multiLock({ collection, ...options }), JSON.stringify(options)).to.throw(Error, message);
      }
      expect(() => multiLock({ collection, locktimeout: 10, lockRelationships: { a: { assertive: ['b'] }, b: { assertive: ['c'] }, c: {} } })).not.to.throw();
    });
  });

  it('a read/write lock under 20 concurrent workers: never a writer with another holder, writers get in', async function () {
    this.timeout(180_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const clients = await Promise.all([0, 1, 2, 3].map(() => newClient()));
    const options = {
      locktimeouts: { read: 5000, write: 5000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    };
    const locks = clients.map((client) => multiLock({ collection: client.db(collection.dbName).collection(collection.collectionName), ...options }));
    let readers = 0;
    let writers = 0;
    let violations = 0;
    const writerWaits: number[] = [];
    const backoff = (attempt: number): Promise<void> => sleep(Math.random() * Math.min(40, 2 ** attempt));

    const read = async (lock: MultiLock): Promise<void> => {
      for (let attempt = 1; ; attempt++) {
        const handle = await lock.acquire({ _id: 'doc' }, { tag: 'read' }).catch((error: unknown) => {
          if (!isLockError(error, 'CooperativeLock')) throw error;
          return undefined;
        });
        if (!handle) {
          await backoff(attempt);
          continue;
        }
        readers++;
        if (writers > 0) violations++;
        await sleep(Math.random() * 6);
        readers--;
        await lock.release({ _id: 'doc' }, { lock: handle });
        return;
      }
    };
    const write = async (lock: MultiLock): Promise<void> => {
      const started = Date.now();
      let pending: LockHandle | undefined;
      for (let attempt = 1; ; attempt++) {
        const handle = await lock.acquire({ _id: 'doc' }, pending ? { lock: pending } : { tag: 'write' }).catch((error: unknown) => {
          if (isLockError(error, 'AssertiveLock')) pending = error.lock as LockHandle;
          else if (!isLockError(error, 'CooperativeLock')) throw error;
          return undefined;
        });
        if (!handle) {
          await backoff(attempt);
          continue;
        }
        writerWaits.push(Date.now() - started);
        writers++;
        if (writers > 1 || readers > 0) violations++;
        await sleep(Math.random() * 6);
        writers--;
        await lock.release({ _id: 'doc' }, { lock: handle });
        return;
      }
    };
    await Promise.all(
      Array.from({ length: 20 }, async (_, worker) => {
        const lock = locks[worker % locks.length]!;
        for (let round = 0; round < 15; round++) await (worker < 5 ? write(lock) : read(lock));
      }),
    );
    writerWaits.sort((x, y) => x - y);
    const median = writerWaits[Math.floor(writerWaits.length / 2)];
    console.log(`      ${writerWaits.length} writes, 225 reads; writer wait median ${median} ms, max ${writerWaits.at(-1)} ms; violations ${violations}`);
    expect(violations).to.equal(0);
    expect(writerWaits).to.have.length(75);
  });
});
