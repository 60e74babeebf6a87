/**
 * A commit's reported outcome is true, exactly once: resolved only when the update landed,
 * `applied: false` only once it can no longer land, `applied: 'unknown'` when it cannot be told,
 * and never "the lock is still held" when it is not.
 */
import { expect } from 'chai';
import type { CommandStartedEvent, Document } from 'mongodb';
import { commit, isLockError, resourceLocks, writeLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { gate, liveEntries, whatAnAcquisitionGets } from '../support/lock-commands';

/** The calls' `timeout`: a reply held back (or lost) misses it; every other command of the call meets it even on a loaded 2-core machine (500 ms did not: a first-run failure). */
const DEADLINE = 2_000;

const debit = (lock: LockHandle<Document, undefined, Document>): Document => ({ $set: { balance: (lock.document?.balance as number) - 30 }, $push: { history: -30 } });

describe('a commit whose outcome is not known at once', () => {
  it('a commit still on its way when the call gives up is reported not applied, and can no longer land', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc', balance: 100, history: [] }]);
    // The commit (the first updateOne) reaches the server only after the call's deadline, and after the settling write.
    const late = gate();
    const slow = delayedCollection(collection, { request: (method, n) => (method === 'updateOne' && n === 1 ? late.promise : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 10_000, timeout: DEADLINE });
    const error = await rejectionOf(accounts.using({ _id: 'acc' }, { document: { balance: 1 } }, (lock) => commit(debit(lock), 'done')));
    late.open();
    await sleep(300); // the late request lands now, or would
    expect({ subtype: error.subtype, applied: (error.data as { applied?: unknown }).applied }).to.deep.equal({ subtype: 'DbError', applied: false });
    expect(error.message).to.match(/not applied, and never will be: the lock was released/);
    const doc = await collection.findOne({ _id: 'acc' as never });
    expect({ balance: doc?.balance, history: doc?.history, held: doc?.lock?.tags?.write?.length }).to.deep.equal({ balance: 100, history: [], held: 0 });
    // The caller retries, as told: exactly one debit.
    await writeLock({ collection }).using({ _id: 'acc' }, { document: { balance: 1 } }, (lock) => commit(debit(lock), 'done'));
    expect((await collection.findOne({ _id: 'acc' as never }))?.history).to.deep.equal([-30]);
  });

  /**
   * Our commit lands but its reply never comes; its settling write waits until `others` more
   * commits landed on the same document. Resolves how our call settled and the document after.
   */
  async function commitSettledAfter(others: number): Promise<{ outcome: unknown; doc: Document | null }> {
    const collection = await freshCollection([{ _id: 'acc', balance: 1_000, history: [] }]);
    const committed = gate();
    const slow = delayedCollection(collection, {
      reply: (method, n) => (method === 'updateOne' && n === 1 ? new Promise(() => undefined) : 0),
      request: (method, n) => (method === 'updateOne' && n === 2 ? committed.promise : 0),
    });
    const accounts = writeLock({ collection: slow, locktimeout: 10_000, timeout: DEADLINE });
    const ours = accounts.using({ _id: 'acc' }, { document: { balance: 1 } }, (lock) => commit(debit(lock), 'ours')).catch((error: unknown) => error);
    // Ours lands first (its reply is what is lost), then the others follow it.
    for (let i = 0; i < 400 && ((await collection.findOne({ _id: 'acc' as never }))?.history?.length ?? 0) === 0; i++) await sleep(10);
    const plain = writeLock({ collection });
    for (let i = 0; i < others; i++) await plain.using({ _id: 'acc' }, { wait: 5_000 }, () => commit({ $inc: { balance: -1 } }, i));
    committed.open();
    const outcome = await ours;
    return { outcome, doc: await collection.findOne({ _id: 'acc' as never }) };
  }

  it('a commit that landed is told apart even after more than 16 commits followed it', async function () {
    this.timeout(20_000);
    const { outcome, doc } = await commitSettledAfter(20);
    expect(outcome).to.equal('ours');
    expect(doc?.history).to.deep.equal([-30]);
  });

  it('a commit whose record was evicted by 64 later commits is unknown, never "not applied"; the document keeps 64 records', async function () {
    this.timeout(60_000);
    const { outcome, doc } = await commitSettledAfter(70);
    expect((outcome as { data?: { applied?: unknown } }).data?.applied, String(outcome)).to.equal('unknown');
    expect(doc?.history, 'our commit landed').to.deep.equal([-30]);
    expect(doc?.lock?.committed).to.have.length(64);
  });

  it('an acquisition prunes the commit records kept past their time, and keeps the others', async () => {
    const kept = new Date(Date.now() + 3_600_000);
    const collection = await freshCollection([{ _id: 'acc', lock: { committed: [{ id: 'old', exp: new Date(Date.now() - 60_000) }, { id: 'new', exp: kept }] } }]);
    const handle = await writeLock({ collection }).acquire({ _id: 'acc' });
    await handle.release();
    expect((await collection.findOne({ _id: 'acc' as never }))?.lock?.committed).to.deep.equal([{ id: 'new', exp: kept }]);
  });

  it('a forced release while the reply was lost: not applied, and the late commit can no longer land', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc', balance: 100, history: [] }]);
    const late = gate();
    const slow = delayedCollection(collection, { request: (method, n) => (method === 'updateOne' && n === 1 ? late.promise : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 10_000, timeout: DEADLINE });
    const held = await accounts.acquire({ _id: 'acc' }, { document: true });
    const committing = rejectionOf(held.release({ update: debit(held) }));
    await sleep(100);
    await writeLock({ collection }).release({ _id: 'acc' }); // monglock v2's forced release, by an operator
    const error = await committing;
    late.open();
    await sleep(300);
    expect((error.data as { applied?: unknown }).applied).to.equal(false);
    expect(error.message).to.match(/not applied, and never will be: the lock was not held/);
    expect((await collection.findOne({ _id: 'acc' as never }))?.balance, 'the late commit could not land').to.equal(100);
  });

  it('a commit MongoDB refuses ($inc of a string) says the update was not applied and that the lock was released', async () => {
    const collection = await freshCollection([{ _id: 'acc', balance: 'many' }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const error = await rejectionOf(accounts.using({ _id: 'acc' }, {}, () => commit({ $inc: { balance: -30 } }, 'x')));
    expect(error.subtype).to.equal('DbError');
    expect((error.data as { applied?: unknown }).applied).to.equal(false);
    expect(error.message).to.match(/lock was released/);
    expect(error.message).not.to.match(/still held/);
    const next = await accounts.acquire({ _id: 'acc' }); // free
    await next.release();
  });

  for (const w of [1, 2] as const) {
  it(`settles with a majority write and a majority read, on the primary (w: ${w}: a number of members below a majority of a set of five is never used for data)`, async function () {
    this.timeout(20_000);
    const client = await newClient({ monitorCommands: true });
    const seen: CommandStartedEvent[] = [];
    client.on('commandStarted', (event) => seen.push(event));
    const raw = await freshCollection([{ _id: 'acc', balance: 100, history: [] }]);
    const collection = client.db(raw.dbName).collection(raw.collectionName);
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'updateOne' && n === 1 ? new Promise(() => undefined) : 0) });
    // What the lock asks for is recorded; a numeric w is sent as 1, which any test server can satisfy.
    const asked: unknown[] = [];
    const oneMember = new Proxy(slow, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (property !== 'findOneAndUpdate' && property !== 'updateOne') return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        return (filter: unknown, update: unknown, options: { writeConcern?: { w?: unknown } }) => {
          asked.push(options.writeConcern?.w);
          const writeConcern = typeof options.writeConcern?.w === 'number' ? { ...options.writeConcern, w: 1 } : options.writeConcern;
          return (value as (...a: unknown[]) => unknown).call(target, filter, update, { ...options, writeConcern });
        };
      },
    });
    const accounts = writeLock({ collection: oneMember, locktimeout: 10_000, timeout: DEADLINE, w });
    await accounts.using({ _id: 'acc' }, { document: { balance: 1 } }, (lock) => commit(debit(lock), 'ok'));
    const updates = seen.filter((event) => event.commandName === 'update').map((event) => (event.command.writeConcern as { w?: unknown }).w);
    const reads = seen.filter((event) => event.commandName === 'aggregate').map((event) => (event.command.readConcern as { level?: unknown } | undefined)?.level);
    expect({ asked, updates, reads }).to.deep.equal({ asked: [w, 'majority', 'majority'], updates: ['majority', 'majority'], reads: ['majority'] });
  });
  }

  it('the handle of a lost acquisition (err.lock) never reports a commit it did not apply', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc', balance: 100 }]);
    // The acquisition lands; its reply comes after the deadline: err.lock is an unconfirmed handle, released in the background.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? DEADLINE + 1_000 : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 10_000, timeout: DEADLINE });
    const lost = await rejectionOf(accounts.acquire({ _id: 'acc' }));
    expect(isLockError(lost, 'DbError')).to.equal(true);
    for (let i = 0; i < 100 && ((await collection.findOne({ _id: 'acc' as never }))?.lock?.tags?.write?.length ?? 0) > 0; i++) await sleep(50);
    const handle = lost.lock as LockHandle;
    await handle.release(); // a plain release of a lock that is not held: nothing to do
    const commitError = await rejectionOf(handle.release({ update: { $inc: { balance: -30 } } }));
    expect(commitError.subtype).to.be.oneOf(['LockNotFound', 'LockWasReacquired']);
    expect((await collection.findOne({ _id: 'acc' as never }))?.balance).to.equal(100);
  });
});

describe('a failed acquisition says whether it may have written a lock', () => {
  it('a malformed filter: the server refused it, nothing was written, no lock to release', async () => {
    const collection = await freshCollection([{ _id: 'a', n: 1 }]);
    const error = await rejectionOf(writeLock({ collection }).acquire({ n: { $bogus: 1 } }));
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/server refused the command: nothing was written/);
    expect(error.message).not.to.match(/may have been written/);
    expect(error.lock).to.equal(undefined);
  });

  it('a closed client: nothing was sent, no lock to release', async () => {
    const raw = await freshCollection([{ _id: 'a' }]);
    const client = await newClient();
    const collection = client.db(raw.dbName).collection(raw.collectionName);
    const lock = writeLock({ collection });
    await client.close();
    const error = await rejectionOf(lock.acquire({ _id: 'a' }));
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/client is closed: nothing was sent/);
    expect(error.lock).to.equal(undefined);
  });

  it('a lost reply: the lock may have been written, and err.lock releases it', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? DEADLINE + 1_000 : 0) });
    const error = await rejectionOf(writeLock({ collection: slow, locktimeout: 10_000, timeout: DEADLINE }).acquire({ _id: 'a' }));
    expect(error.message).to.match(/may have been written: release err.lock/);
    expect(error.lock).not.to.equal(undefined);
  });
});

/*
 * The folded pattern's promise (README, "Read-modify-write in two commands", and
 * examples/folded.ts): the release writes the update only if the lock is still held, else it
 * rejects and nothing is written. A commit is one updateOne whose reply can be lost (a dropped
 * connection, a wtimeout at majority, the client-side `timeout`). The defect guarded against:
 * using() rejected with `DbError` although the server had applied the update and released the
 * lock, and nothing told the two cases apart; a caller that trusted "rejected, so nothing was
 * written" and ran the section again applied it twice (here: two debits).
 */
describe('a commit whose reply is lost', () => {
  it('a commit that landed but whose reply was lost resolves (its id is read back), so nothing is debited twice', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acc-1', balance: 100, history: [] }]);
    // The first updateOne (the commit) is applied; its reply comes back after the call's timeout.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'updateOne' && n === 1 ? DEADLINE + 1_000 : 0) });
    const accounts = writeLock({ collection: slow, locktimeout: 5_000, timeout: DEADLINE });
    const debit = (): Promise<number> =>
      accounts.using({ _id: 'acc-1' }, { wait: 2_000, document: { balance: 1 } }, (lock) => {
        const next = (lock.document?.balance as number) - 30;
        return commit({ $set: { balance: next }, $push: { history: -30 } }, next);
      });
    let attempts = 0;
    let error: (Error & { subtype?: string }) | undefined;
    for (;;) {
      attempts++;
      try {
        await debit();
        break;
      } catch (caught) {
        error ??= caught as Error & { subtype?: string };
        if (attempts === 2) break;
      }
    }
    console.log(`      first attempt: ${error?.message}`);
    const doc = await collection.findOne({ _id: 'acc-1' as never });
    // The commit landed: monglock reads its id back (lock.committed) and using() resolves, so no retry debits twice.
    expect({ attempts, balance: doc?.balance, history: doc?.history }, 'one debit of 30').to.deep.equal({ attempts: 1, balance: 70, history: [-30] });
  });
});

/*
 * A commit with `match` (a positional `$` update whose element the caller's filter selects): the
 * write that settles a lost reply and the explanation of a refusal both carry the caller's match,
 * and must still tell a commit that landed from one that could not (the lock was taken meanwhile).
 */
describe('a commit with match', () => {
  const CART = [
    { sku: 'x', qty: 1 },
    { sku: 'y', qty: 2 },
  ];

  it('whose reply is lost: settles as applied (its id is read back), the element match selects updated once', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'cart', items: CART }]);
    // The first updateOne (the commit) is applied; its reply comes back after the call's timeout.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'updateOne' && n === 1 ? DEADLINE + 1_000 : 0) });
    const carts = writeLock({ collection: slow, locktimeout: 5_000, timeout: DEADLINE });
    const outcome = await carts.using({ _id: 'cart' }, {}, () => commit({ $inc: { 'items.$.qty': 10 } }, 'added', { match: { 'items.sku': 'y' } })).then(
      (value) => ({ said: `resolved ${value}`, applied: true as unknown }),
      (error: Error & { data?: { applied?: unknown } }) => ({ said: error.message, applied: error.data?.applied }),
    );
    const doc = await collection.findOne({ _id: 'cart' as never });
    expect(doc?.items, `the commit landed once (the call said: ${outcome.said})`).to.deep.equal([{ sku: 'x', qty: 1 }, { sku: 'y', qty: 12 }]);
    expect(outcome, 'the call reports the update applied').to.deep.equal({ said: 'resolved added', applied: true });
    expect(doc?.lock?.tags?.write ?? [], 'the commit released the lock').to.have.length(0);
  });

  it('after the lease ran out and another caller took the document: LockWasReacquired, nothing written, the other caller keeps its lock', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'cart', items: CART }]);
    const carts = writeLock({ collection, locktimeout: 500 });
    const held = await carts.acquire({ _id: 'cart' });
    const other = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 'cart' }, { wait: 5_000 }); // admitted once the lease ran out
    const before = await collection.findOne({ _id: 'cart' as never });
    const refused = await rejectionOf(held.release({ update: { $inc: { 'items.$.qty': 10 } }, match: { 'items.sku': 'y' } }));
    const after = await collection.findOne({ _id: 'cart' as never });
    expect(refused.subtype, refused.message).to.equal('LockWasReacquired');
    expect(after, 'nothing written').to.deep.equal(before);
    expect((await liveEntries(collection, 'cart')).map((entry) => entry.id), "the other caller's lock").to.deep.equal([other.id]);
    await other.release();
  });
});

/*
 * `holdWhile` (lib/locks/scoped-hold.ts) ends a body that returned `commit(update, value)` with
 * one write that applies the update and releases. That write can be refused for a reason that is
 * not the lock: the server refuses the caller's update (a duplicate key, `$inc` on a string, a
 * schema validator, a positional operator), or monglock's own validation throws a TypeError before
 * sending. The defect guarded against: nothing was released then and nothing else tried, so
 * using() rejected and the lock stayed held, with nobody extending it, until its lease ended (for
 * a resource lock without `ttl`, whose release refuses any `update`: forever). A body that throws
 * instead was already released.
 */
describe('a commit that cannot be applied', () => {
  it('using(): an update the server refuses ($inc on a string) rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 'one hundred' }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(accounts.using({ _id: 1 }, { document: true }, () => commit({ $inc: { balance: -30 } }, 'done')));
    console.log(`      using() rejected: ${failed.message}`);
        expect(await whatAnAcquisitionGets(accounts, { _id: 1 }), 'the lock after using() settled').to.equal('acquired');
  });

  it('using(): a unique-index violation in the commit rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([
      { _id: 1, email: 'a@example.com' },
      { _id: 2, email: 'b@example.com' },
    ]);
    await collection.createIndex({ email: 1 }, { unique: true });
    const users = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(users.using({ _id: 1 }, undefined, () => commit({ $set: { email: 'b@example.com' } })));
    console.log(`      using() rejected: ${failed.message}`);
        expect(await whatAnAcquisitionGets(users, { _id: 1 }), 'the lock after using() settled').to.equal('acquired');
  });

  it('using(): a commit that monglock refuses (it touches the lock field) rejects and releases the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const failed = await rejectionOf(accounts.using({ _id: 1 }, undefined, () => commit({ $set: { 'lock.note': 'x' } })));
    expect(failed.name).to.equal('TypeError');
        expect(await whatAnAcquisitionGets(accounts, { _id: 1 }), 'the lock after using() settled').to.equal('acquired');
  });

  it('resource locks: using() whose body returns commit() is refused and releases its lock without ttl', async function () {
    this.timeout(15_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const failed = await rejectionOf(locks.using('printer', 'job-1', {}, () => commit({ $set: { printed: true } }, 'ok')));
    console.log(`      using() rejected: ${failed.message}`);
    const status = await locks.status();
    expect(status, 'locks left after using() settled').to.deep.equal([]);
  });
});
