/**
 * handle.convert(tag) under lost replies, extensions in flight, and pending upgrades it need not wait for (found by an independent review; each test failed before its fix).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };

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
});
