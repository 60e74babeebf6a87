/**
 * handle.convert(tag) under lost replies, extensions in flight, and pending upgrades it need not wait for (found by an independent review; each test failed before its fix).
 */
import { expect } from 'chai';
import { MongoNetworkError, type Collection, type Document } from 'mongodb';
import { commit, multiLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { landingLate, wrapWrites, type LateLanding } from '../../stress/server-faults';
import { gate, isExtension, isPlainRelease } from '../support/lock-commands';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };

/** A conversion's write: it moves the entry (+1 on the fence) and takes its own upgrade mark out. */
const isConversion = (method: string, args: readonly unknown[]): boolean =>
  method === 'findOneAndUpdate' && (args[1] as Document).$inc?.['lock.fence'] === 1 && (args[1] as Document).$pull?.['lock.upgrade'] !== undefined;
/** The write that takes a mark out: it only pulls `lock.upgrade`. */
const isMarkDrop = (_method: string, args: readonly unknown[]): boolean => (args[1] as Document | undefined)?.$pull?.['lock.upgrade'] !== undefined && (args[1] as Document).$inc === undefined;
/** A waiting conversion's mark (`lock.upgrade`), set or renewed. */
const isMark = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && (args[1] as Document).$set?.['lock.upgrade'] !== undefined;

/** `collection` whose writes `lose` names land, and whose replies are then lost (a network error). */
function losingReplies(collection: Collection<Document>, lose: (method: string, args: readonly unknown[]) => boolean): Collection<Document> {
  return wrapWrites(collection, async (method, args, _n, send) => {
    const result = await send(args);
    if (lose(method, args)) throw new MongoNetworkError('the reply was lost (simulated)');
    return result;
  });
}

/** The live upgrade marks of document `_id`. */
async function liveMarks(collection: Collection<Document>, _id: unknown): Promise<unknown[]> {
  const doc = await collection.findOne({ _id: _id as never });
  return ((doc?.lock?.upgrade ?? []) as Array<{ exp: Date }>).filter((mark) => mark.exp.getTime() > Date.now());
}

/** Waits (up to 5 s) until document `_id` stores no upgrade mark: it was taken out (a lapsed mark stays stored). */
async function untilNoMarkStored(collection: Collection<Document>, _id: unknown): Promise<void> {
  for (let i = 0; i < 250 && ((await collection.findOne({ _id: _id as never }))?.lock?.upgrade ?? []).length > 0; i++) await sleep(20);
}

/** Every stored entry (any tag) of document `_id`, with its tag. */
async function storedEntries(collection: Collection<Document>, _id: unknown): Promise<Array<{ tag: string; id: string; exp: Date }>> {
  const doc = await collection.findOne({ _id: _id as never });
  const tags = (doc?.lock?.tags ?? {}) as Record<string, Array<{ id: string; exp: Date }>>;
  return Object.entries(tags).flatMap(([tag, entries]) => entries.map((entry) => ({ tag, id: entry.id, exp: entry.exp })));
}

describe('convert under races: lost replies, extensions in flight, pending upgrades', () => {
  it('a conversion whose reply is lost leaves no lock behind once its caller releases the handle', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let slow = false;
    // The conversion's update lands; its reply comes after the call's deadline (a lost reply).
    const delayed = delayedCollection(collection, { reply: (method) => (slow && method === 'findOneAndUpdate' ? 800 : 0) });
    const rw = multiLock({ collection: delayed, timeout: 300, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    slow = true;
    const lost = await rejectionOf(handle.convert('write'));
    slow = false;
    expect(lost.subtype).to.equal('DbError');
    await sleep(1_000); // the late reply has come and gone

    // The caller gives up: it releases the lock it holds, as the handle tells it.
    const released = await handle.release().then(
      () => 'released',
      (error: { subtype?: string }) => error.subtype,
    );
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id && entry.exp.getTime() > Date.now());
    expect({ released, left }, 'the handle released what it holds, and nothing of it is left').to.deep.equal({ released: 'released', left: [] });
  });

  it('an extension whose reply arrives after a conversion does not give the converted lock a lease the server never granted', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let plan: 'off' | 'on' = 'off';
    const isConvert = (args: readonly unknown[]): boolean => '$inc' in ((args[1] ?? {}) as Document) && plan === 'on';
    const isExtend = (args: readonly unknown[]): boolean => ((args[2] ?? {}) as Document).arrayFilters !== undefined && plan === 'on';
    const delayed = delayedCollection(collection, {
      // A slow way there for the conversion (its stamp is taken before), a slow way back for the extension.
      request: (method, _n, args) => (method === 'findOneAndUpdate' && isConvert(args) ? 60 : 0),
      reply: (method, _n, args) => (method === 'findOneAndUpdate' && isExtend(args) ? 400 : 0),
    });
    const rw = multiLock({ collection: delayed, locktimeouts: { read: 60_000, write: 1_000 }, lockRelationships: relationships });
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    await rw.inspect({ _id: 'doc' }); // clock bounds
    plan = 'on';
    const converting = handle.convert('write', { locktimeout: 1_000 });
    await sleep(15);
    const extending = handle.extend(60_000); // lands before the conversion (the read lock is extended), its reply after
    await converting;
    await extending.catch(() => undefined);
    plan = 'off';
    const stored = (await storedEntries(collection, 'doc')).find((entry) => entry.id === handle.id);
    const facts = { tag: stored?.tag, handleWithinStored: handle.expiresAt <= (stored?.exp.getTime() ?? 0), remainingAfterIntruder: -1 };

    // The consequence: once the stored write lock has expired, another writer gets in, while the
    // converted handle still reports most of a minute of lease left.
    await sleep(1_300);
    const other = multiLock({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const intruder = await other.acquire({ _id: 'doc' }, { tag: 'write' });
    facts.remainingAfterIntruder = handle.remaining();
    await intruder.release();
    expect(facts, 'what the handle can rely on never outlasts the stored expiry; once another writer holds, it has nothing left').to.deep.equal({
      tag: 'write',
      handleWithinStored: true,
      remainingAfterIntruder: 0,
    });
  });

  it('using(): a lease extension in flight during a conversion does not abort the body as if the lock were lost', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let extendSeen: () => void = () => undefined;
    const extendStarted = new Promise<void>((resolve) => (extendSeen = resolve));
    const delayed = delayedCollection(collection, {
      // The keeper's extension (arrayFilters) takes a slow way there: the conversion overtakes it.
      request: (method, _n, args) => {
        if (method !== 'findOneAndUpdate' || ((args[2] ?? {}) as Document).arrayFilters === undefined) return 0;
        extendSeen();
        return 150;
      },
    });
    const rw = multiLock({ collection: delayed, locktimeouts: { read: 600, write: 600 }, lockRelationships: relationships });
    const seen = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle, signal) => {
      await extendStarted;
      await handle.convert('write');
      await sleep(300);
      const held = (await storedEntries(collection, 'doc')).some((entry) => entry.id === handle.id && entry.tag === 'write' && entry.exp.getTime() > Date.now());
      return { held, aborted: signal.aborted, reason: (signal.reason as { subtype?: string } | undefined)?.subtype };
    });
    expect(seen.held, 'the converted lock is held all along').to.equal(true);
    expect(seen, 'the body is not told the lock was lost').to.deep.equal({ held: true, aborted: false, reason: undefined });
  });

  it('UpgradeConflict only for a conversion that would wait for the pending upgrade: one to an unrelated tag waits for its own blocker', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const ml = multiLock({
      collection,
      locktimeouts: { read: 60_000, write: 60_000, audit: 60_000 },
      lockRelationships: { ...relationships, audit: { cooperative: ['audit'] } },
    });
    const upgrader = await ml.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await ml.acquire({ _id: 'doc' }, { tag: 'read' });
    const auditor = await ml.acquire({ _id: 'doc' }, { tag: 'audit' });
    const upgrade = upgrader.convert('write', { wait: 10_000 }); // waits for `reader`, marks the document
    for (let i = 0; i < 100 && ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length === 0; i++) await sleep(20);
    setTimeout(() => void auditor.release(), 300);
    // `reader` leaves the read tag for audit, which waits only for `auditor` (no cycle: it even
    // frees the upgrader): it should get audit once `auditor` is gone.
    const outcome = await reader.convert('audit', { wait: 5_000 }).then(
      () => 'converted',
      (error: { subtype?: string }) => error.subtype,
    );
    await reader.release().catch(() => undefined);
    await upgrade.catch(() => undefined);
    await upgrader.release().catch(() => undefined);
    expect(outcome).to.equal('converted');
  });

  it('a waiting upgrade whose mark\'s reply is lost waits on, and completes once the other readers are gone, leaving no mark', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let marksLost = 0;
    const lossy = losingReplies(collection, (method, args) => isMark(method, args) && marksLost === 0 && ++marksLost === 1);
    const rw = multiLock({ collection: lossy, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const upgrader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const upgrade = upgrader.convert('write', { wait: 10_000 }).then(
      () => 'converted',
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    for (let i = 0; i < 250 && marksLost === 0; i++) await sleep(20);
    await sleep(100);
    await reader.release();
    const outcome = await upgrade;
    const facts = { outcome, tag: upgrader.tag, maybeTag: upgrader.toJSON().maybeTag, marks: (await liveMarks(collection, 'doc')).length };
    await upgrader.release();
    expect(marksLost, 'a mark\'s reply was lost').to.equal(1);
    expect(facts, 'the wait went on after the lost reply, and the conversion took its mark out').to.deep.equal({ outcome: 'converted', tag: 'write', maybeTag: undefined, marks: 0 });
  });

  it('an upgrade that gives up after its mark\'s reply was lost takes the mark out and keeps its old tag (no maybeTag): readers are admitted once the mark\'s removal lands', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lossy = losingReplies(collection, isMark);
    const rw = multiLock({ collection: lossy, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const other = multiLock({ collection, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const upgrader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const refused = await rejectionOf(upgrader.convert('write', { wait: 800 }));
    await untilNoMarkStored(collection, 'doc');
    const newcomer = await other.acquire({ _id: 'doc' }, { tag: 'read' }).then(
      (handle) => handle.release().then(() => 'admitted'),
      (error: Error) => error.message,
    );
    const facts = { refused: refused.subtype, tag: upgrader.tag, maybeTag: upgrader.toJSON().maybeTag, marks: (await liveMarks(collection, 'doc')).length, newcomer };
    await Promise.all([upgrader.release(), reader.release()]);
    expect(facts, refused.message).to.deep.equal({ refused: 'CooperativeLock', tag: 'read', maybeTag: undefined, marks: 0, newcomer: 'admitted' });
  });

  it('a waiting conversion whose own reply is lost does not end the wait: it finds out that it landed, and the handle holds the new tag', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let lost = 0;
    const lossy = losingReplies(collection, (method, args) => isConversion(method, args) && lost === 0 && ++lost === 1);
    const rw = multiLock({ collection: lossy, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const outcome = await handle.convert('write', { wait: 5_000 }).then(
      () => 'converted',
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    const stored = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id).map((entry) => entry.tag);
    const facts = { stored, tag: handle.tag, maybeTag: handle.toJSON().maybeTag };
    await handle.release();
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id);
    expect(lost, 'the conversion\'s reply was lost').to.equal(1);
    expect(outcome, 'the caller hears that it landed, its reply lost').to.match(/^DbError: .*landed/);
    expect(facts, 'the handle says what is stored').to.deep.equal({ stored: ['write'], tag: 'write', maybeTag: undefined });
    expect(left, 'its release removed it').to.deep.equal([]);
  });

  it('a body that catches a conversion\'s lost reply (it landed) and returns commit(): the update lands under the new tag and the lock is released', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc', n: 0 }]);
    let lose = false;
    const lossy = losingReplies(collection, (method, args) => lose && isConversion(method, args));
    const rw = multiLock({ collection: lossy, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    let id = '';
    const outcome = await rw
      .using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle) => {
        id = handle.id;
        lose = true;
        const lost = await rejectionOf(handle.convert('write'));
        lose = false;
        return commit({ $inc: { n: 1 } }, lost.subtype);
      })
      .then(
        (value) => `resolved ${String(value)}`,
        (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
      );
    const doc = await collection.findOne({ _id: 'doc' as never });
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === id).map((entry) => entry.tag);
    expect({ outcome, n: doc?.n, left }, 'committed, and nothing of the lock is left').to.deep.equal({ outcome: 'resolved DbError', n: 1, left: [] });
  });

  it('a body that catches a conversion\'s lost reply (it had not landed yet) and returns commit(): the update lands under the old tag, and the conversion landing later matches nothing', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc', n: 0 }]);
    let lose = false;
    const landed: LateLanding[] = [];
    // The conversion's connection drops at once; the command, blocked on the server, lands 400 ms later.
    const late = landingLate(collection, (method, args) => lose && isConversion(method, args), 400, landed);
    const rw = multiLock({ collection: late, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    let id = '';
    const outcome = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle) => {
      id = handle.id;
      lose = true;
      const lost = await rejectionOf(handle.convert('write'));
      lose = false;
      return commit({ $inc: { n: 1 } }, `${lost.subtype}, then committed as a ${handle.tag} lock`);
    });
    for (let i = 0; i < 250 && landed[0]?.appliedAt === undefined; i++) await sleep(20);
    const doc = await collection.findOne({ _id: 'doc' as never });
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === id).map((entry) => entry.tag);
    expect(landed[0]?.appliedAt, 'the conversion reached the server after the commit').to.be.a('number');
    expect({ outcome, n: doc?.n, left }, 'committed once, and the late conversion found no lock to move').to.deep.equal({ outcome: 'DbError, then committed as a read lock', n: 1, left: [] });
  });

  it('an abort while a conversion\'s write is on its way rejects at once with the reason; what the write lands afterwards is undone, and the handle says what is stored', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const way = gate();
    let held = false;
    const slow = delayedCollection(collection, {
      request: (method, _n, args) => {
        if (held || !isConversion(method, args)) return undefined;
        held = true;
        return way.promise;
      },
    });
    const rw = multiLock({ collection: slow, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const controller = new AbortController();
    const converting = handle.convert('write', { wait: 5_000, signal: controller.signal });
    for (let i = 0; i < 250 && !held; i++) await sleep(20);
    const reason = new Error('the caller gave up');
    controller.abort(reason);
    const rejected = await converting.then(
      () => 'resolved',
      (error: unknown) => (error === reason ? 'the reason' : String(error)),
    );
    const whileOnItsWay = held && (await storedEntries(collection, 'doc')).find((entry) => entry.id === handle.id)?.tag;
    way.open(); // the conversion lands now
    let stored: string[] = [];
    for (let i = 0; i < 250; i++) {
      await sleep(20);
      stored = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id).map((entry) => entry.tag);
      if (stored.length === 1 && stored[0] === handle.tag && (await liveMarks(collection, 'doc')).length === 0 && stored[0] === 'read') break;
    }
    const facts = { rejected, whileOnItsWay, stored, tag: handle.tag, maybeTag: handle.toJSON().maybeTag, marks: (await liveMarks(collection, 'doc')).length };
    await handle.release();
    expect(facts, 'rejected before the write landed; once it landed, undone').to.deep.equal({ rejected: 'the reason', whileOnItsWay: 'read', stored: ['read'], tag: 'read', maybeTag: undefined, marks: 0 });
    expect(await storedEntries(collection, 'doc'), 'its release removed it').to.deep.equal([]);
  });

  it('an abort of a waiting upgrade whose mark is set rejects with the reason at once, without waiting for the write that takes the mark out', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const dropWay = gate();
    let dropHeld = false;
    const slow = delayedCollection(collection, {
      request: (method, _n, args) => {
        if (!isMarkDrop(method, args)) return undefined;
        dropHeld = true;
        return dropWay.promise; // a slow way to the server (a stalled connection, a failover)
      },
    });
    const rw = multiLock({ collection: slow, timeout: 10_000, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const upgrader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const reader = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const controller = new AbortController();
    const events: string[] = [];
    const converting = upgrader.convert('write', { wait: 10_000, signal: controller.signal }).then(
      () => events.push('converted'),
      (error: Error) => events.push(error.message === 'the caller gave up' ? 'rejected with the reason' : `rejected: ${error.message}`),
    );
    for (let i = 0; i < 250 && (await liveMarks(collection, 'doc')).length === 0; i++) await sleep(20);
    controller.abort(new Error('the caller gave up'));
    for (let i = 0; i < 150 && events.length === 0; i++) await sleep(20); // up to 3 s
    events.push(`mark drop released (it was ${dropHeld ? 'held' : 'never sent'})`);
    dropWay.open();
    await converting;
    await untilNoMarkStored(collection, 'doc');
    const marks = ((await collection.findOne({ _id: 'doc' as never }))?.lock?.upgrade ?? []).length;
    await Promise.all([upgrader.release(), reader.release()]);
    expect(events, 'the call rejected at once with the reason, before the mark\'s removal reached the server').to.deep.equal(['rejected with the reason', 'mark drop released (it was held)']);
    expect(marks, 'the mark was taken out (not left to lapse) once its removal reached the server').to.equal(0);
  });

  it('a release sent after an aborted conversion landed (and before it was converted back) releases the lock: it is not refused as not held, and nothing is left', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const conversionReply = gate();
    const releaseWay = gate();
    let conversions = 0;
    let releaseHeld = false;
    const slow = delayedCollection(collection, {
      // The release takes a slow way there: it reaches the server after the conversion.
      request: (method, _n, args) => {
        if (!isPlainRelease(method, args) || releaseHeld) return undefined;
        releaseHeld = true;
        return releaseWay.promise;
      },
      // The first conversion's reply takes a slow way back (the server applied it): the caller aborts meanwhile.
      reply: (method, _n, args) => (isConversion(method, args) && ++conversions === 1 ? conversionReply.promise : undefined),
    });
    const rw = multiLock({ collection: slow, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const handle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const controller = new AbortController();
    const converting = handle.convert('write', { wait: 5_000, signal: controller.signal });
    for (let i = 0; i < 250 && conversions === 0; i++) await sleep(20);
    controller.abort(new Error('the caller gave up'));
    const rejected = await converting.then(
      () => 'resolved',
      (error: Error) => error.message,
    );
    // The caller, told its conversion failed, lets its read lock go.
    const releasing = handle.release().then(
      () => 'released',
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    for (let i = 0; i < 250 && !releaseHeld; i++) await sleep(20);
    const whenReleaseSent = (await storedEntries(collection, 'doc')).map((entry) => entry.tag);
    releaseWay.open(); // the release reaches the server: the lock is a write lock there now
    await sleep(200);
    conversionReply.open(); // the conversion's reply arrives: the run converts it back
    const released = await releasing;
    await sleep(300);
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id && entry.exp.getTime() > Date.now()).map((entry) => entry.tag);
    expect({ rejected, whenReleaseSent }, 'the conversion was aborted, and had landed when the release was sent').to.deep.equal({ rejected: 'the caller gave up', whenReleaseSent: ['write'] });
    expect({ released, left, tag: handle.tag }, 'the release the caller asked for released the lock: nothing of it is left').to.deep.equal({ released: 'released', left: [], tag: 'read' });
  });

  it('using(): a lock whose conversion reply was lost (it landed) relies on no more than the conversion\'s lease: MongoDB unreachable, the body is told before another writer holds, and remaining() is 0', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    let lose = false;
    let outage = false;
    const lossy = wrapWrites(collection, async (method, args, _n, send) => {
      if (outage && isExtension(method, args)) throw new MongoNetworkError('MongoDB cannot be reached (simulated)');
      const result = await send(args);
      if (lose && isConversion(method, args)) throw new MongoNetworkError('the reply was lost (simulated)');
      return result;
    });
    const locktimeouts = { read: 10_000, write: 600 };
    const rw = multiLock({ collection: lossy, locktimeouts, lockRelationships: relationships });
    const other = multiLock({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), locktimeouts, lockRelationships: relationships });
    let seen: unknown;
    const outcome = await rw.using({ _id: 'doc' }, { tag: 'read' }, async (handle: LockHandle, signal) => {
      outage = true; // from now on, no extension reaches MongoDB: the stored write lock lapses after 600 ms
      lose = true;
      const lost = await handle.convert('write').then(
        () => 'converted',
        (error: Error & { subtype?: string }) => error.subtype,
      );
      lose = false;
      const intruder = await other.acquire({ _id: 'doc' }, { tag: 'write', wait: 5_000 });
      seen = { lost, maybeTag: handle.toJSON().maybeTag, intruderHolds: true, bodyAborted: signal.aborted, remaining: handle.remaining() };
      outage = false;
      await intruder.release();
    }).then(
      () => 'resolved',
      (error: Error & { subtype?: string }) => error.subtype,
    );
    expect(seen, 'while another writer holds, the body was told its lock is lost and the handle relies on no lease').to.deep.equal({
      lost: 'DbError',
      maybeTag: 'write',
      intruderHolds: true,
      bodyAborted: true,
      remaining: 0,
    });
    expect(outcome, 'using() ends with the lock lost').to.equal('LockNotFound');
  });

  it('using(): a lock whose conversion reply was lost (it landed) is kept with the new tag\'s lease once the keeper finds it there, not the old tag\'s', async function () {
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
