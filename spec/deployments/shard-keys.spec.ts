/**
 * A collection sharded on a key other than `_id`: mongos 4.4–6.x refuses a findAndModify without an
 * equality on the whole shard key (code 61), and an updateOne without `_id` or the shard key
 * (simulated: stress/simulated-cluster.ts). Every write to a locked document after its acquisition
 * (extensions, continuations, conversions, fair tickets, hand-overs, nested holds, the release of
 * a lock whose reply was lost) names the document's shard key values, read from the acquisition's
 * reply (which carries them whatever the caller's `document` projection says), or, when no reply
 * came, from the caller's filter (its top level and its top-level `$and`, where mongos finds them).
 */
import { expect } from 'chai';
import { MongoServerError, type Collection, type Document } from 'mongodb';
import { acquireAll, commit, isLockError, multiLock, writeLock, type LockHandle } from '../../lib';
import { addressFromFilter } from '../../lib/engine/address';
import { delayedCollection } from '../../stress/delayed-collection';
import { failingAfterLanding } from '../../stress/server-faults';
import { metadataUnauthorized, simulatedCluster } from '../../stress/simulated-cluster';
import { realNow } from '../support/clock';
import { commandsSentBy, freshCollection, rejectionOf, sleep } from '../support/fixture';
import { liveEntries, until } from '../support/lock-commands';

const SHARD_KEY = { region: 1, _id: 1 } as const;

/** Writes the simulated mongos refused for want of the shard key, in the current test. */
let refused: string[] = [];

/** A collection sharded on `{ region, _id }`, seen through one simulated mongos (on the server's clock, so the skew assumed is 0). */
async function shardedCollection(docs: Document[]): Promise<{ raw: Collection<Document>; routed: Collection<Document> }> {
  const raw = await freshCollection(docs);
  return { raw, routed: simulatedCluster(raw, { routers: [{ offsetMs: 0 }], shardKey: SHARD_KEY, onRefusal: (method, error) => refused.push(`${method}: ${error.message}`) }) };
}

/** `collection` whose first findOneAndUpdate lands and then fails as the driver's retry of it would (462, a rate limit): a lost reply. */
function retryRefused(collection: Collection<Document>): Collection<Document> {
  const error = (): MongoServerError => new MongoServerError({ ok: 0, code: 462, codeName: 'IngressRequestRateLimitExceeded', errmsg: 'rate limited (simulated retry)' });
  return failingAfterLanding(collection, (method, _args, n) => method === 'findOneAndUpdate' && n === 1, error);
}

/** Whether the document `_id` holds no live lock entry. */
const unlocked = (collection: Collection<Document>, id: string) => async (): Promise<boolean> => (await liveEntries(collection, id)).length === 0;

describe('a collection sharded on another key than _id', () => {
  beforeEach(() => {
    refused = [];
  });

  afterEach(function () {
    if (this.currentTest?.state === 'passed') expect(refused, 'writes the simulated mongos refused for want of the shard key').to.deep.equal([]);
  });

  it('the simulated mongos refuses a findAndModify that names only _id (the test is real)', async () => {
    const { routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    const error = await rejectionOf(routed.findOneAndUpdate({ _id: 'a' } as Document, { $set: { x: 1 } }));
    expect(error).to.include({ code: 61 });
    expect(refused).to.have.length(1);
    refused = [];
  });

  it('using(): every lease extension names the shard key, so the body runs to its commit with its signal never aborted', async function () {
    this.timeout(20_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu', n: 0 }]);
    const lock = writeLock({ collection: routed, locktimeout: 300, maxClockSkew: 0 });
    const expiries: number[] = [];
    const result = await lock.using({ _id: 'a', region: 'eu' }, { document: { n: 1 } }, async (held, signal) => {
      for (let i = 0; i < 6; i++) {
        expiries.push(held.expiresAt);
        await sleep(200);
      }
      expect(signal.aborted, String(signal.reason)).to.equal(false);
      return commit({ $inc: { n: 1 } }, 'committed');
    });
    expect(result).to.equal('committed');
    expect(new Set(expiries).size, 'the lease was extended while the body ran').to.be.at.least(3);
    expect((await raw.findOne({ _id: 'a' as never }))?.n).to.equal(1);
    expect(await liveEntries(raw, 'a')).to.have.length(0);
  });

  it('an assertive writer continues its registration and gets the lock once the reader is gone', async function () {
    this.timeout(20_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    const lock = multiLock({
      collection: routed,
      maxClockSkew: 0,
      locktimeouts: { read: 5_000, write: 5_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const reader = await lock.acquire({ _id: 'a', region: 'eu' }, { tag: 'read' });
    const writing = lock.acquire({ _id: 'a', region: 'eu' }, { tag: 'write', wait: 5_000 });
    await sleep(300); // registered, continuing while the reader holds
    await reader.release();
    const writer = await writing;
    expect(writer.tag).to.equal('write');
    await writer.release();
    expect(await liveEntries(raw, 'a')).to.have.length(0);
  });

  it('a conversion (read to write and back) and a nested hold of an owner name the shard key', async () => {
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }, { _id: 'b', region: 'us' }]);
    const rw = multiLock({ collection: routed, maxClockSkew: 0, locktimeouts: { read: 5_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } } });
    const handle = await rw.acquire({ _id: 'a', region: 'eu' }, { tag: 'read' });
    await handle.convert('write');
    await handle.convert('read');
    await handle.release();
    const owned = writeLock({ collection: routed, maxClockSkew: 0, locktimeout: 5_000 });
    const outer = await owned.acquire({ _id: 'b', region: 'us' }, { owner: 'job-1' });
    const inner = await owned.acquire({ _id: 'b', region: 'us' }, { owner: 'job-1' });
    expect(inner.fence).to.equal(outer.fence);
    await inner.release();
    await outer.release();
    expect(await liveEntries(raw, 'a', 'read')).to.have.length(0);
    expect(await liveEntries(raw, 'b')).to.have.length(0);
  });

  it('fair waiters take and renew their tickets, and a release hands the lock over, by the shard key', async function () {
    this.timeout(20_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    const lock = writeLock({ collection: routed, maxClockSkew: 0, locktimeout: 5_000, fair: true });
    const other = writeLock({ collection: routed, maxClockSkew: 0, locktimeout: 5_000, fair: true });
    const holder = await lock.acquire({ _id: 'a', region: 'eu' });
    const order: string[] = [];
    // One waiter of another lock object (it polls with a ticket it renews), then two of this one (handed over in one write).
    const waiters = ['other', 'first', 'second'].map(async (name, i) => {
      await sleep(50 * i);
      const held: LockHandle = await (name === 'other' ? other : lock).acquire({ _id: 'a', region: 'eu' }, { wait: 10_000 });
      order.push(name);
      await sleep(20);
      await held.release();
    });
    await sleep(1_500); // long enough for the tickets to be renewed
    await holder.release();
    await Promise.all(waiters);
    expect(order).to.deep.equal(['other', 'first', 'second']);
    expect(await liveEntries(raw, 'a')).to.have.length(0);
    expect((await raw.findOne({ _id: 'a' as never }))?.lock?.queue ?? []).to.satisfy((queue: Array<{ exp: Date }>) => queue.every((ticket) => ticket.exp.getTime() <= realNow()));
  });

  it('a shard key the lock may not read from config.collections: the first call fails before writing, naming the shardKey option, which then makes it work', async () => {
    const raw = await freshCollection([{ _id: 'a', region: 'eu' }]);
    const routed = simulatedCluster(raw, { routers: [{ offsetMs: 0 }], shardKey: SHARD_KEY, shardKeyAnswer: () => Promise.reject(metadataUnauthorized()) });
    const blind = writeLock({ collection: routed, maxClockSkew: 0 });
    const error = await rejectionOf(blind.acquire({ _id: 'a', region: 'eu' }));
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/could not read the shard key .* give the lock its `shardKey` option/);
    expect(await liveEntries(raw, 'a')).to.have.length(0);
    const told = writeLock({ collection: routed, maxClockSkew: 0, shardKey: SHARD_KEY });
    await (await told.acquire({ _id: 'a', region: 'eu' })).extend(5_000).then((handle) => handle.release());
  });

  it('a lock whose reply was lost is released by its id and the shard key values of the caller\'s filter', async function () {
    this.timeout(20_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    // The acquisition's reply comes back after the call's 300 ms timeout: the call fails with the lock it may hold.
    const slow = delayedCollection(routed, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? 1_000 : 0) });
    const lock = writeLock({ collection: slow, maxClockSkew: 0, locktimeout: 10_000, timeout: 300 });
    const failed = await rejectionOf(lock.acquire({ _id: 'a', region: 'eu' }));
    expect(isLockError(failed, 'DbError')).to.equal(true);
    expect(failed.lock, 'the lock it may hold').to.be.an('object');
    await until(unlocked(raw, 'a'), 5_000);
    expect(await liveEntries(raw, 'a'), 'the written lock was released').to.have.length(0);
  });

  it('a lost reply of an acquisition whose filter names the shard key inside a top-level $and (mongos routes it): the lock it wrote is released by the values found there', async function () {
    this.timeout(30_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    const lock = writeLock({ collection: retryRefused(routed), maxClockSkew: 0, locktimeout: 30_000, timeout: 1_000 });
    const error = await rejectionOf(lock.acquire({ $and: [{ _id: 'a' }, { $and: [{ region: 'eu' }] }] }));
    expect(error.subtype).to.equal('DbError');
    expect(error.lock, 'the lock it may hold').to.be.an('object');
    expect(await liveEntries(raw, 'a'), 'the first attempt landed').to.have.length(1);
    await until(unlocked(raw, 'a'), 10_000);
    expect(await liveEntries(raw, 'a'), `the lock is released (of its 30 s lease); refused: ${JSON.stringify(refused)}`).to.have.length(0);
  });

  it('acquireAll: a member whose filter is { _id, region } is locked by that filter, without a read first, and released when its reply was lost', async function () {
    this.timeout(30_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu' }]);
    const lock = writeLock({ collection: retryRefused(routed), maxClockSkew: 0, locktimeout: 30_000, timeout: 1_000 });
    const { error, commands } = await commandsSentBy(() => acquireAll([{ lock, filter: { _id: 'a', region: 'eu' } }]));
    expect((error as Error & { subtype?: string }).subtype, String(error)).to.equal('DbError');
    expect(commands, 'no read of the document before it is locked').to.not.include('find');
    await until(unlocked(raw, 'a'), 10_000);
    expect(await liveEntries(raw, 'a'), `the member's lock is released (of its 30 s lease); refused: ${JSON.stringify(refused)}`).to.have.length(0);
  });

  it('acquireAll: a member selected by other fields is locked through its filter and its _id, and released by the shard key named there when its reply was lost', async function () {
    this.timeout(30_000);
    const { raw, routed } = await shardedCollection([{ _id: 'a', region: 'eu', name: 'alpha' }]);
    const lock = writeLock({ collection: retryRefused(routed), maxClockSkew: 0, locktimeout: 30_000, timeout: 1_000 });
    const error = await rejectionOf(acquireAll([{ lock, filter: { name: 'alpha', region: 'eu' } }]));
    expect(error.subtype, error.message).to.equal('DbError');
    expect(await liveEntries(raw, 'a'), 'the first attempt landed').to.have.length(1);
    await until(unlocked(raw, 'a'), 10_000);
    expect(await liveEntries(raw, 'a'), `the member's lock is released (of its 30 s lease); refused: ${JSON.stringify(refused)}`).to.have.length(0);
  });

  it('the address of a lock whose reply was lost holds only equalities the filter implies on the exact shard key paths', () => {
    const key = ['region', '_id'];
    expect(addressFromFilter({ _id: 'a', $and: [{ region: { $eq: 'eu' } }] }, key)).to.deep.equal({ region: 'eu', _id: 'a' });
    expect(addressFromFilter({ $and: [{ $and: [{ _id: 'a' }] }, { region: null }] }, key)).to.deep.equal({ region: null, _id: 'a' });
    // Not equalities, or not on the exact path: nothing.
    expect(addressFromFilter({ _id: 'a', $or: [{ region: 'eu' }] }, key)).to.deep.equal({ _id: 'a' });
    expect(addressFromFilter({ _id: { $in: ['a'] }, $and: [{ region: /eu/ }, { region: { $gte: 'eu' } }] }, key)).to.deep.equal({});
    expect(addressFromFilter({ meta: { region: 'eu' }, $and: [{ 'meta.region': { $eq: { $ne: 'us' } } }] }, ['meta.region'])).to.deep.equal({});
    // Equalities that disagree match no document: no address is made of either.
    expect(addressFromFilter({ _id: 'a', region: 'eu', $and: [{ region: 'us' }] }, key)).to.deep.equal({ _id: 'a' });
  });

  it('a dotted shard key and a `document` projection that leaves it out: every write after the acquisition names it, and handle.document is as projected', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'a', meta: { region: 'eu', notes: 'large' }, n: 0 }]);
    const routed = simulatedCluster(raw, { routers: [{ offsetMs: 0 }], shardKey: { 'meta.region': 1 }, onRefusal: (method, error) => refused.push(`${method}: ${error.message}`) });
    const lock = writeLock({ collection: routed, maxClockSkew: 0, locktimeout: 10_000 });
    const filter = { _id: 'a', 'meta.region': 'eu' };
    const seen: unknown[] = [];
    const result = await lock.using(filter, { document: { meta: 0 } }, async (held) => {
      seen.push(held.document);
      await held.extend(10_000);
      return commit({ $inc: { n: 1 } }, 'committed');
    });
    expect(result).to.equal('committed');
    expect(seen).to.deep.equal([{ _id: 'a', n: 0 }]);
    expect((await raw.findOne({ _id: 'a' as never }))?.n, 'the commit landed').to.equal(1);
    expect(await liveEntries(raw, 'a'), 'the lock was released').to.have.length(0);
  });

  it('a dotted shard key: handle.document is exactly what the caller\'s projection selects, whichever way it names the key\'s parent, the key or a path inside it', async function () {
    this.timeout(30_000);
    const meta = { region: { zone: 'eu-1', dc: 'x' }, notes: 'large' };
    const raw = await freshCollection([{ _id: 'a', meta, n: 0 }]);
    const routed = simulatedCluster(raw, { routers: [{ offsetMs: 0 }], shardKey: { 'meta.region': 1 }, onRefusal: (method, error) => refused.push(`${method}: ${error.message}`) });
    const lock = writeLock({ collection: routed, maxClockSkew: 0, locktimeout: 10_000 });
    const filter = { _id: 'a', 'meta.region': meta.region };
    const cases: Array<[Record<string, 0 | 1>, Document]> = [
      [{ meta: 0 }, { _id: 'a', n: 0 }],
      [{ 'meta.region': 0 }, { _id: 'a', meta: { notes: 'large' }, n: 0 }],
      [{ 'meta.region.dc': 0, _id: 0 }, { meta: { region: { zone: 'eu-1' }, notes: 'large' }, n: 0 }],
      [{ n: 1 }, { _id: 'a', n: 0 }],
      [{ 'meta.notes': 1, _id: 0 }, { meta: { notes: 'large' } }],
      [{ 'meta.region.zone': 1 }, { _id: 'a', meta: { region: { zone: 'eu-1' } } }],
      [{ meta: 1 }, { _id: 'a', meta }],
    ];
    for (const [document, expected] of cases) {
      const held = await lock.acquire(filter, { document });
      expect(held.document, JSON.stringify(document)).to.deep.equal(expected);
      await (await held.extend(10_000)).release();
      expect(await liveEntries(raw, 'a'), `released, after ${JSON.stringify(document)}`).to.have.length(0);
    }
  });
});
