import { createServer } from 'node:net';
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { MongoClient, MongoServerError } from 'mongodb';
import { isLockError, LockError, LockHandle, writeLock } from '../../lib';
import { commandsSentBy, freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

const variants = [
  { name: 'without boom', boom: undefined },
  { name: 'with @hapi/boom', boom: Boom },
] as const;

/** Checks an error's outcome in both shapes: LockError, or a boom error as hapi would answer it. */
function expectOutcome(error: Error & Record<string, unknown>, subtype: string, status: number, withBoom: boolean): void {
  expect(error.subtype, error.message).to.equal(subtype);
  expect(isLockError(error, subtype as never)).to.equal(true);
  if (withBoom) {
    expect(Boom.isBoom(error)).to.equal(true);
    const boomError = error as unknown as Boom.Boom;
    expect(boomError.output.statusCode).to.equal(status);
    expect(boomError.message).to.equal(subtype);
    if (status < 500) expect(boomError.output.payload.message).to.equal(subtype);
  } else {
    expect(error).to.be.instanceOf(LockError);
    expect(error.statusCode).to.equal(status);
    expect(error.name).to.equal('LockError');
  }
}

describe('writeLock', () => {
  for (const variant of variants) {
    describe(`outcomes ${variant.name}`, () => {
      const withBoom = variant.boom !== undefined;

      it('acquires an existing document, refuses a second acquirer, releases', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = writeLock({ collection, locktimeout: 5000, boom: variant.boom });
        const handle = await lock.acquire({ _id: 1 });
        expect(handle).to.be.instanceOf(LockHandle);
        expect(handle.id).to.match(/^[0-9a-f]{32}$/);
        expect(handle.fence).to.equal(1);
        expect(handle.expiresAt - handle.timestamp).to.equal(5000);
        const stored = await collection.findOne({ _id: 1 as never });
        expect(stored?.lock.tags.write).to.have.length(1);
        expect(stored?.lock.tags.write[0].id).to.equal(handle.id);

        expectOutcome(await rejectionOf(lock.acquire({ _id: 1 })), 'LockAlreadyTaken', 409, withBoom);
        await lock.release({ _id: 1 }, { lock: handle });
        const again = await lock.acquire({ _id: 1 });
        expect(again.fence).to.equal(2);
        expect(again.timestamp).to.be.at.least(handle.timestamp);
      });

      it('rejects RessourceNotFound for a missing document, on acquire and on release', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = writeLock({ collection, boom: variant.boom });
        expectOutcome(await rejectionOf(lock.acquire({ _id: 2 })), 'RessourceNotFound', 404, withBoom);
        const handle = await lock.acquire({ _id: 1 });
        expectOutcome(await rejectionOf(lock.release({ _id: 2 }, { lock: handle })), 'RessourceNotFound', 404, withBoom);
        expectOutcome(await rejectionOf(lock.release({ _id: 2 })), 'RessourceNotFound', 404, withBoom);
        expect(await collection.countDocuments()).to.equal(1);
      });

      it('frees the lock after locktimeout; the stale holder then gets LockWasReacquired', async () => {
        const collection = await freshCollection([{ _id: 1 }]);
        const lock = writeLock({ collection, locktimeout: 150, boom: variant.boom });
        const stale = await lock.acquire({ _id: 1 });
        expectOutcome(await rejectionOf(lock.acquire({ _id: 1 })), 'LockAlreadyTaken', 409, withBoom);
        await sleep(200);
        const next = await lock.acquire({ _id: 1 });
        expect(next.fence).to.be.greaterThan(stale.fence);
        expectOutcome(await rejectionOf(lock.release({ _id: 1 }, { timestamp: stale.timestamp })), 'LockWasReacquired', 409, withBoom);
        expectOutcome(await rejectionOf(lock.release({ _id: 1 }, { lock: stale })), 'LockWasReacquired', 409, withBoom);
        await lock.release({ _id: 1 }, { lock: next });
      });

      it('turns driver failures into DbError with the driver error as cause', async () => {
        const collection = await freshCollection([{ _id: 1, lock: 'not an object' }]);
        const lock = writeLock({ collection, boom: variant.boom });
        const error = await rejectionOf(lock.acquire({ _id: 1 }));
        expectOutcome(error, 'DbError', 500, withBoom);
        expect(error.cause).to.be.instanceOf(MongoServerError);
        expect(await collection.findOne({ _id: 1 as never })).to.deep.equal({ _id: 1, lock: 'not an object' });
      });
    });
  }

  describe('release', () => {
    it('accepts the handle as timestamp, the bare timestamp, or the handle after a JSON round trip', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const asTimestamp = await lock.acquire({ _id: 1 });
      await lock.release({ _id: 1 }, { timestamp: asTimestamp });
      await sleep(2); // a bare timestamp is refused when two locks of the document share its ms (next test)
      const bare = await lock.acquire({ _id: 1 });
      await lock.release({ _id: 1 }, { timestamp: bare.timestamp });
      const parsed = JSON.parse(JSON.stringify(await lock.acquire({ _id: 1 })));
      expect(Object.keys(parsed).sort()).to.deep.equal(['expiresAt', 'fence', 'id', 'tag', 'timestamp']);
      await lock.release({ _id: 1 }, { lock: parsed });
      await lock.acquire({ _id: 1 });
    });

    it('a bare timestamp shared by two locks of one document (taken in one ms) is refused, never releasing the other', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const first = await lock.acquire({ _id: 1 });
      await first.release();
      const second = await lock.acquire({ _id: 1 });
      // Two acquisitions in one server ms (which back-to-back calls produce now and then): the
      // document as they leave it, its last two stamps and the live entry's in the first one's ms.
      const ms = new Date(first.timestamp);
      await collection.updateOne({ _id: 1 as never }, { $set: { 'lock.recent.write': [ms, ms], 'lock.tags.write.0.at': ms } });
      const stale = await rejectionOf(lock.release({ _id: 1 }, { timestamp: first.timestamp }));
      expect(stale.subtype).to.equal('LockNotFound');
      expect(stale.message).to.match(/cannot tell them apart/);
      const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write as Array<{ id: string }>;
      expect(stored.map((entry) => entry.id), 'the second lock is still held').to.deep.equal([second.id]);
      await lock.release({ _id: 1 }, { timestamp: second }); // the handle itself proves which lock
      expect((await collection.findOne({ _id: 1 as never }))?.lock.tags.write).to.deep.equal([]);
    });

    it('releasing twice reports LockNotFound, not success', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const handle = await lock.acquire({ _id: 1 });
      await handle.release();
      expect((await rejectionOf(lock.release({ _id: 1 }, { lock: handle }))).subtype).to.equal('LockNotFound');
    });

    it('without a proof is monglock v2\'s forced release', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const holder = await lock.acquire({ _id: 1 });
      await lock.release({ _id: 1 });
      const next = await lock.acquire({ _id: 1 });
      expect(next.fence).to.equal(holder.fence + 1);
      expect((await rejectionOf(lock.release({ _id: 1 }, { lock: holder }))).subtype).to.equal('LockWasReacquired');
    });

    it('a proof key that is given must be a proof: null, undefined, a number as `lock` or two proofs are refused before anything is written', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const holder = await lock.acquire({ _id: 1 });
      const bad: Array<Record<string, unknown>> = [
        { lock: undefined },
        { lock: null },
        { lock: holder.timestamp }, // a guessable ms where a 128-bit bearer token belongs
        { timestamp: undefined },
        { timestamp: null },
        { lock: holder, timestamp: holder.timestamp },
      ];
      for (const params of bad) {
        for (const call of [() => lock.release({ _id: 1 }, params as never), () => lock.extend({ _id: 1 }, params as never)]) {
          const error = await rejectionOf(call());
          expect(error, `${JSON.stringify(params)} is refused`).to.be.instanceOf(TypeError);
          expect(error.message, 'the message names the proof').to.match(/params\.(lock|timestamp)/);
        }
      }
      const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write as Array<{ id: string; exp: Date }>;
      expect(stored.map((entry) => entry.id), 'the holder still holds its lock').to.deep.equal([holder.id]);
      expect(stored[0]?.exp.getTime(), 'and its lease was not extended').to.equal(holder.expiresAt);
      await lock.release({ _id: 1 }, { lock: holder });
    });

    it('releases an expired lock that nobody took over, as monglock v2 did', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 50 });
      const handle = await lock.acquire({ _id: 1 });
      await sleep(80);
      await lock.release({ _id: 1 }, { lock: handle });
      expect((await collection.findOne({ _id: 1 as never }))?.lock.tags.write).to.deep.equal([]);
    });
  });

  describe('filters', () => {
    it('works with $or, $and and nested fields (monglock v2 broke on $or)', async () => {
      const collection = await freshCollection([
        { _id: 1, owner: { name: 'ann' }, kind: 'a' },
        { _id: 2, owner: { name: 'bob' }, kind: 'b' },
      ]);
      const lock = writeLock({ collection });
      const byOr = { $or: [{ _id: 5 }, { 'owner.name': 'bob' }] };
      const handle = await lock.acquire(byOr);
      expect((await collection.findOne({ _id: 2 as never }))?.lock.tags.write[0].id).to.equal(handle.id);
      expect((await rejectionOf(lock.acquire({ $and: [{ kind: 'b' }, { $or: [{ _id: 2 }] }] }))).subtype).to.equal('LockAlreadyTaken');
      const other = await lock.acquire({ $and: [{ 'owner.name': 'ann' }, { $or: [{ kind: 'a' }, { kind: 'z' }] }] });
      expect(other.fence).to.equal(1);
      await lock.release(byOr, { lock: handle });
      await lock.release({ 'owner.name': 'ann' }, { lock: other });
    });

    it('locks the first free matching document when a filter matches several, and releases that one', async () => {
      const collection = await freshCollection([{ _id: 1, g: 1 }, { _id: 2, g: 1 }]);
      const lock = writeLock({ collection });
      const first = await lock.acquire({ g: 1 });
      const second = await lock.acquire({ g: 1 });
      expect((await rejectionOf(lock.acquire({ g: 1 }))).subtype).to.equal('LockAlreadyTaken');
      const held = await collection.find({ 'lock.tags.write.0': { $exists: true } }).toArray();
      expect(held.map((doc) => doc.lock.tags.write[0].id).sort()).to.deep.equal([first.id, second.id].sort());
      await lock.release({ g: 1 }, { lock: second });
      await lock.release({ g: 1 }, { lock: first });
    });
  });

  describe('round trips (driver command monitoring)', () => {
    it('acquire = 1 command, release = 1, refused acquire = 2', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      await lock.release({ _id: 1 }, { lock: await lock.acquire({ _id: 1 }) });

      const acquired = await commandsSentBy(() => lock.acquire({ _id: 1 }));
      expect(acquired.commands).to.deep.equal(['findAndModify']);
      const refused = await commandsSentBy(() => lock.acquire({ _id: 1 }));
      expect((refused.error as LockError).subtype).to.equal('LockAlreadyTaken');
      expect(refused.commands).to.deep.equal(['findAndModify', 'aggregate']);
      const released = await commandsSentBy(() => lock.release({ _id: 1 }, { lock: acquired.result as LockHandle }));
      expect(released.commands).to.deep.equal(['update']);
    });
  });

  describe('concurrency', () => {
    it('50 simultaneous acquirers on one document: exactly one wins', async () => {
      const collection = await freshCollection([{ _id: 'hot' }]);
      const clients = await Promise.all([0, 1, 2, 3].map(() => newClient()));
      const locks = clients.map((client) => writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName) }));
      const outcomes = await Promise.allSettled(Array.from({ length: 50 }, (_, i) => locks[i % locks.length]!.acquire({ _id: 'hot' })));
      const won = outcomes.filter((outcome) => outcome.status === 'fulfilled');
      const refused = outcomes.filter((outcome) => outcome.status === 'rejected' && isLockError(outcome.reason, 'LockAlreadyTaken'));
      expect(won).to.have.length(1);
      expect(refused).to.have.length(49);
    });

    it('20 workers x 50 rounds incrementing a counter under the lock: no lost update', async function () {
      this.timeout(120_000);
      const collection = await freshCollection([{ _id: 'counter', value: 0 }]);
      const clients = await Promise.all([0, 1, 2, 3].map(() => newClient()));
      const worker = async (index: number): Promise<void> => {
        const coll = clients[index % clients.length]!.db(collection.dbName).collection(collection.collectionName);
        const lock = writeLock({ collection: coll, locktimeout: 10_000 });
        for (let round = 0; round < 50; round++) {
          let handle: LockHandle | undefined;
          for (let attempt = 1; !handle; attempt++) {
            handle = await lock.acquire({ _id: 'counter' }).catch(async (error: unknown) => {
              if (!isLockError(error, 'LockAlreadyTaken')) throw error;
              await sleep(Math.random() * Math.min(50, 2 ** attempt));
              return undefined;
            });
          }
          const doc = await coll.findOne({ _id: 'counter' as never });
          await coll.updateOne({ _id: 'counter' as never }, { $set: { value: (doc?.value as number) + 1 } });
          await lock.release({ _id: 'counter' }, { lock: handle });
        }
      };
      await Promise.all(Array.from({ length: 20 }, (_, index) => worker(index)));
      const final = await collection.findOne({ _id: 'counter' as never });
      expect(final?.value).to.equal(1000);
      expect(final?.lock.fence).to.equal(1000);
    });
  });

  describe('timeouts', () => {
    it('a call against a stopped server rejects with DbError within `timeout`', async () => {
      const port = await new Promise<number>((done) => {
        const server = createServer();
        server.listen(0, '127.0.0.1', () => {
          const address = server.address() as { port: number };
          server.close(() => done(address.port));
        });
      });
      const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`, { serverSelectionTimeoutMS: 20_000 });
      try {
        const lock = writeLock({ collection: client.db('x').collection('y'), timeout: 400 });
        const started = Date.now();
        const error = await rejectionOf(lock.acquire({ _id: 1 }));
        const elapsed = Date.now() - started;
        expect(error.subtype).to.equal('DbError');
        expect(error.cause).to.be.instanceOf(Error);
        expect(elapsed).to.be.within(350, 1500);
        const releaseError = await rejectionOf(lock.release({ _id: 1 }, { timestamp: 5 }));
        expect(releaseError.subtype).to.equal('DbError');
      } finally {
        await client.close();
      }
    });
  });
});

/*
 * monglock v2's bare-timestamp proofs: release() refuses a timestamp that two locks share
 * (lock.recent), and so must extend(). The defect guarded against: extend() did not check it, so a
 * stale holder's extend by timestamp succeeded on the next holder's lock taken in the same ms, and
 * the stale holder was told it held the lock.
 */
describe('writeLock.extend with a v2 timestamp shared by two locks', () => {
  it('after a forced release, the old holder extending by its timestamp must be refused, not extend the new holder\'s lock', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const first = await lock.acquire({ _id: 1 }); // worker A (v2 code: keeps first.timestamp)
    await lock.release({ _id: 1 }); // an operator's forced release (v2: no proof)
    const second = await lock.acquire({ _id: 1 }); // worker B
    // Two acquisitions stamped in one ms happen on a fast server; make it so whatever this
    // machine's speed: B's lock and both stamps in the ms of A's, as such a run stores them.
    const at = new Date(first.timestamp);
    await collection.updateOne({ _id: 1 as never }, { $set: { 'lock.tags.write.0.at': at, 'lock.recent.write': [at, at] } });
    // Sanity: release by this timestamp is refused as ambiguous (claim 6)...
    expect((await rejectionOf(lock.release({ _id: 1 }, { timestamp: first.timestamp }))).message).to.match(/cannot tell them apart/);
    // ...and so is extend by the same timestamp:
    const outcome = await lock.extend({ _id: 1 }, { timestamp: first.timestamp, locktimeout: 60_000 }).then(
      (handle) => `resolved: A now believes it holds the lock until ${new Date(handle.expiresAt).toISOString()}`,
      (error: Error & { subtype?: string }) => error.subtype,
    );
    const stored = (await collection.findOne({ _id: 1 as never }))?.lock.tags.write as Array<{ id: string; exp: Date }>;
    expect(stored.map((entry) => entry.id), 'B still holds').to.deep.equal([second.id]);
    expect(outcome, `A's stale extend; B's lock now expires in ${stored[0]!.exp.getTime() - Date.now()} ms`).to.be.oneOf(['LockWasReacquired', 'LockNotFound']);
  });
});
