/**
 * Faults between the driver and MongoDB: network faults through a TCP proxy, and lost replies (a
 * reply held back past the call's deadline, a request that reaches the server late). Every call
 * settles, its failure says what may have been written, and a lock whose reply was lost is never
 * left held by nobody.
 */
import { expect } from 'chai';
import { MongoClient, type Collection, type Document } from 'mongodb';
import { isLockError, LockHandle, resourceLocks, writeLock, type WriteLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { FaultProxy, type Fault } from '../../stress/fault-proxy';
import { freshCollection, mongoBackend, rejectionOf, sleep } from '../support/fixture';
import { whatAnAcquisitionGets } from '../support/lock-commands';

const TIMEOUT = 400;
const LEASE = 1_500;

interface Tally {
  started: number;
  settled: number;
  slowest: number;
  errors: Error[];
}

/** Starts `call`, recording when it settles and how. */
function track(tally: Tally, call: () => PromiseLike<unknown>): Promise<void> {
  tally.started++;
  const begun = Date.now();
  return Promise.resolve(call()).then(
    () => undefined,
    (error: Error) => void tally.errors.push(error),
  ).finally(() => {
    tally.settled++;
    tally.slowest = Math.max(tally.slowest, Date.now() - begun);
  });
}

describe('network faults (TCP proxy between the driver and MongoDB)', function () {
  this.timeout(60_000);
  let proxy: FaultProxy;
  let client: MongoClient;
  let collection: Collection<Document>;
  let viaProxy: Collection<Document>;
  let lock: WriteLock;

  beforeEach(async () => {
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    proxy = new FaultProxy(hostname, Number(port));
    await proxy.start();
    client = new MongoClient(proxy.uri(), { serverSelectionTimeoutMS: 1_000, connectTimeoutMS: 1_000, socketTimeoutMS: 1_500, maxPoolSize: 40, maxConnecting: 40 });
    await client.connect();
    // A warm pool: the calls under test measure the fault, not connection set-up.
    await Promise.all(Array.from({ length: 40 }, () => client.db('admin').command({ ping: 1 })));
    collection = await freshCollection(Array.from({ length: 40 }, (_, i) => ({ _id: i })));
    viaProxy = client.db(collection.dbName).collection(collection.collectionName);
    lock = writeLock({ collection: viaProxy, timeout: TIMEOUT, locktimeout: LEASE });
    // The lock asks the deployment what it is (one `hello`) before its first write: not under a fault.
    await (await lock.acquire({ _id: 39 })).release();
  });

  afterEach(async () => {
    proxy.set({ kind: 'none' });
    await proxy.stop();
    await client.close(true).catch(() => undefined);
  });

  const faults: Array<{ fault: Fault; fails: boolean }> = [
    { fault: { kind: 'latency', ms: 30 }, fails: false },
    { fault: { kind: 'latency', ms: 700 }, fails: true },
    { fault: { kind: 'drop' }, fails: true },
    { fault: { kind: 'reset' }, fails: true },
    { fault: { kind: 'blackhole' }, fails: true },
    { fault: { kind: 'lose-replies' }, fails: true },
  ];
  for (const { fault, fails } of faults) {
    it(`${JSON.stringify(fault)}: every call settles within its timeout, failures are DbError with a cause, and state stays consistent`, async () => {
      const held: LockHandle[] = [];
      for (let i = 0; i < 10; i++) held.push(await lock.acquire({ _id: i }));
      proxy.set(fault);
      const tally: Tally = { started: 0, settled: 0, slowest: 0, errors: [] };
      const calls: Array<Promise<void>> = [];
      for (let i = 10; i < 30; i++) calls.push(track(tally, () => lock.acquire({ _id: i })));
      for (const handle of held.slice(0, 5)) calls.push(track(tally, () => handle.release()));
      for (const handle of held.slice(5)) calls.push(track(tally, () => handle.extend()));
      await sleep(TIMEOUT + 300);
      const pending = tally.started - tally.settled;
      await Promise.all(calls);
      console.log(`      ${tally.started} calls, ${pending} pending after timeout + 300 ms, slowest ${tally.slowest} ms, ${tally.errors.length} failed`);
      expect(pending).to.equal(0);
      expect(tally.slowest).to.be.below(TIMEOUT + 300);
      if (fails) expect(tally.errors.length).to.be.greaterThan(0);
      else expect(tally.errors).to.deep.equal([]);
      for (const error of tally.errors) {
        expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
        expect((error as Error & { cause?: unknown }).cause, String(error)).to.be.instanceOf(Error);
      }

      proxy.set({ kind: 'none' });
      const now = Date.now();
      const docs = await collection.find().toArray();
      for (const doc of docs) {
        const entries = (doc.lock?.tags?.write ?? []) as Array<{ exp: Date }>;
        const live = entries.filter((entry) => entry.exp.getTime() > now);
        expect(live.length, `document ${String(doc._id)}: never two holders`).to.be.at.most(1);
        for (const entry of live) expect(entry.exp.getTime(), 'nothing held beyond its lease').to.be.at.most(now + LEASE + 50);
      }
      // Recovered: after the leases, every document can be locked again through the proxy.
      await sleep(LEASE + 100);
      const again = await Promise.all(Array.from({ length: 30 }, (_, i) => lock.acquire({ _id: i }, { wait: 3_000, timeout: 2_000 }).then(() => true, () => false)));
      expect(again.filter(Boolean).length).to.equal(30);
    });
  }

  it('a lock written whose reply was lost is reported as DbError carrying it, and is released without the caller', async () => {
    proxy.set({ kind: 'lose-replies' });
    const error = await lock.acquire({ _id: 35 }).then(() => undefined, (caught: Error & { lock?: LockHandle }) => caught);
    proxy.set({ kind: 'none' });
    expect(isLockError(error, 'DbError')).to.equal(true);
    expect(error?.lock).to.be.instanceOf(LockHandle);
    expect((await collection.findOne({ _id: 35 as never }))?.lock?.fence, 'the write was applied').to.equal(1);
    // The caller does not hold it (its call failed), so the library releases it in the background.
    for (let waited = 0; ; waited += 20) {
      const held = (await collection.findOne({ _id: 35 as never }))?.lock?.tags?.write as Array<{ exp: Date }>;
      if (held.every((entry) => entry.exp.getTime() <= Date.now())) break;
      expect(waited, 'released within two timeouts').to.be.below(2 * TIMEOUT + 500);
      await sleep(20);
    }
    // err.lock still settles a caller's own release: done, or already released.
    const again = await writeLock({ collection: viaProxy }).release({ _id: 35 }, { lock: error!.lock! }).then(() => 'released', (caught: Error) => caught);
    expect(again === 'released' || isLockError(again, 'LockNotFound') || isLockError(again, 'LockWasReacquired'), String(again)).to.equal(true);
  });

  it('plain releases at w: 1 (releaseW) under faults: never two holders, fences increasing', async () => {
    // 8 workers on one document through the proxy, with faults switched every 150 ms; every
    // holder records when it believed it held the lock (until its body ended or its signal aborted).
    const holds: Array<{ id: string; fence: number; start: number; end: number }> = [];
    let running = true;
    const faults: Fault[] = [{ kind: 'none' }, { kind: 'latency', ms: 60 }, { kind: 'none' }, { kind: 'lose-replies' }, { kind: 'none' }, { kind: 'none' }, { kind: 'drop' }];
    const switcher = (async () => {
      for (let i = 0; running; i++) {
        proxy.set(faults[i % faults.length]!);
        await sleep(150);
      }
      proxy.set({ kind: 'none' });
    })();
    setTimeout(() => (running = false), 5_000);
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (running) {
          await lock
            .using({ _id: 1 }, { wait: 1_000 }, async (handle, signal) => {
              const start = Date.now();
              let end = 0;
              await Promise.race([sleep(20), new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))]);
              end = Date.now();
              holds.push({ id: handle.id, fence: handle.fence, start, end });
            })
            .catch(() => undefined);
        }
      }),
    );
    await switcher;
    holds.sort((a, b) => a.start - b.start);
    for (let i = 1; i < holds.length; i++) {
      expect(holds[i]!.start, `holder ${i} started before holder ${i - 1} ended`).to.be.at.least(holds[i - 1]!.end);
      expect(holds[i]!.fence).to.be.greaterThan(holds[i - 1]!.fence);
    }
    expect(holds.length, 'sections ran').to.be.greaterThan(5);
    console.log(`      ${holds.length} critical sections under switching faults, releases at w: 1: no overlap`);
  });

  it('using() aborts its signal when an extension fails, and settles', async () => {
    const started = Date.now();
    let reason: unknown;
    const outcome = await lock
      .using({ _id: 39 }, { locktimeout: 600 }, async (_handle, signal) => {
        setTimeout(() => proxy.set({ kind: 'blackhole' }), 100);
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        reason = signal.reason;
        return 'stopped';
      })
      .then((value) => value, (error: Error) => error);
    expect(isLockError(reason, 'DbError') || isLockError(reason, 'LockNotFound'), String(reason)).to.equal(true);
    expect(Date.now() - started).to.be.below(600 + 2 * TIMEOUT + 500);
    expect(outcome === 'stopped' || isLockError(outcome, 'DbError')).to.equal(true);
  });
});

/*
 * A lock whose reply was lost (the client-side deadline passed) while the request that writes it
 * may still be on its way to the server. The defect guarded against: the lock was released at
 * once, the release matched nothing, the write landed afterwards, and nobody released it again.
 */
describe('a lost reply whose request is still in flight', () => {
  it('resourceLocks without ttl: xlock fails with DbError, and no lock is held afterwards (a late write is refused or released)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    // The lock's findOneAndUpdate reaches the server 600 ms late (a stalled connection); the
    // call's timeout is 200 ms. Everything else (the creating upsert, the release) is prompt.
    const slow = resourceLocks({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 600 : 0) }),
      timeout: 200,
    });
    const error = await rejectionOf(slow.xlock('r', 'gave-up'));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(1_500);
    const other = resourceLocks({ collection });
    const held = await other.status({ resource: 'r' });
    // The caller was told its call failed and the library "released what it wrote": nothing may be held.
    expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'a lock nobody holds, with no expiry').to.deep.equal([]);
  });

  it('writeLock: acquire fails with DbError, and the document is free afterwards', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const slow = writeLock({
      collection: delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 600 : 0) }),
      timeout: 200,
      locktimeout: 10_000,
    });
    const error = await rejectionOf(slow.acquire({ _id: 1 }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    await sleep(1_000);
    const other = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await whatAnAcquisitionGets(other, { _id: 1 });
    expect(outcome, 'the document is free again (the failed caller holds nothing)').to.equal('acquired');
  });
});

describe('a lost reply whose request is still in flight, over a real TCP connection (fault proxy: a latency spike on one request)', () => {
  it('resourceLocks without ttl, a client that already knows the server clock: a 90 ms spike against a 40 ms timeout leaves nothing held', async function () {
    this.timeout(20_000);
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    const proxy = new FaultProxy(hostname, Number(port));
    await proxy.start();
    const client = new MongoClient(proxy.uri(), { maxPoolSize: 4 });
    try {
      await client.connect();
      await Promise.all(Array.from({ length: 4 }, () => client.db('admin').command({ ping: 1 })));
      const collection = await freshCollection();
      const viaProxy = client.db(collection.dbName).collection(collection.collectionName);
      const locks = resourceLocks({ collection: viaProxy });
      for (let i = 0; i < 5; i++) await (await locks.xlock('r', 'first')).release(); // synchronized, 'r' known
      proxy.set({ kind: 'latency', ms: 90 });
      const pending = locks.xlock('r', 'gave-up', { timeout: 40 });
      await sleep(20);
      proxy.set({ kind: 'none' }); // the spike is over: the release that follows the deadline goes straight through
      const error = await rejectionOf(pending);
      expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
      await sleep(500);
      const held = await resourceLocks({ collection }).status({ resource: 'r' });
      expect(held.map((s) => `${s.lockId} (ttl ${s.ttl})`), 'the failed caller holds nothing').to.deep.equal([]);
    } finally {
      await client.close(true).catch(() => undefined);
      await proxy.stop();
    }
  });
});

/*
 * A lock whose reply was lost is released (by the library, and by the caller through err.lock) by
 * its lock id in the locked document, not with the caller's acquisition filter. The defect guarded
 * against: released with that filter, a lock whose document no longer matched it (the filter names
 * the lock field, or a field the application changes) was found by neither release and stayed
 * until its lease ended.
 */
describe('releasing a lock whose reply was lost', () => {
  it('with a filter that names the lock field ({ lock: { $exists: false } }): the background release and err.lock.release() both find the document by the lock id', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    // The server executes the lock at once; its reply comes back after the call's 200 ms timeout.
    const slow = writeLock({ collection: delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 500 : 0) }), timeout: 200, locktimeout: 10_000 });
    const error = await rejectionOf(slow.acquire({ _id: 1, lock: { $exists: false } }));
    expect(isLockError(error, 'DbError'), String(error)).to.equal(true);
    const own = await (error.lock as LockHandle).release().then(() => 'released', (e: Error & { subtype?: string }) => e.subtype);
    await sleep(700);
    const other = await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 });
    expect({ own, other }, 'the caller was told the lock may have been written and to release err.lock').to.deep.equal({ own: 'released', other: 'acquired' });
  });
});
