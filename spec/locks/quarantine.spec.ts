/**
 * Quarantine: an exclusive holder ends its hold with a mark, in one write, and every acquisition of
 * the document is refused with `Quarantined` until the mark ends (`until`, by the server's clock)
 * or is cleared.
 */
import * as Boom from '@hapi/boom';
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { acquireAll, isLockError, multiLock, quarantine, semaphore, usingAll, writeLock, type LockHandle } from '../../lib';
import { makeServer, released, stopServers } from '../support/hapi-server';
import { delayedCollection } from '../../stress/delayed-collection';
import { commandsSentBy, failureOf, freshCollection, newClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';
import { isCommit, never } from '../support/lock-commands';

/** The entries of every tag of document `id`. */
async function entriesOf(collection: Collection, id: unknown): Promise<unknown[]> {
  const doc = await collection.findOne({ _id: id as never });
  return Object.values((doc?.lock?.tags ?? {}) as Record<string, unknown[]>).flat();
}

/** The same collection seen through a client of its own. */
async function viaNewClient(collection: Collection): Promise<Collection<Document>> {
  return (await newClient()).db(collection.dbName).collection(collection.collectionName);
}

describe('handle.quarantine({ reason, until?, update? }): an error state on the lock', function () {
  this.timeout(30_000);

  it('ends the hold in one write that applies the update and leaves the mark (reason, server time, holder id)', async () => {
    const collection = await freshCollection([{ _id: 1, state: 'new' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const handle = await lock.acquire({ _id: 1 });
    const before = Date.now();
    const { error, commands } = await commandsSentBy(() => handle.quarantine({ reason: 'payload does not parse', update: { $set: { state: 'poisoned' } } }));
    expect(error).to.equal(undefined);
    expect(commands, 'one write, nothing read').to.deep.equal(['update']);
    const doc = await collection.findOne({ _id: 1 as never });
    expect(doc?.state).to.equal('poisoned');
    expect(doc?.lock.tags.write, 'the hold ended').to.deep.equal([]);
    expect(doc?.lock.quarantine).to.have.keys('reason', 'since', 'by');
    expect(doc?.lock.quarantine).to.deep.include({ reason: 'payload does not parse', by: handle.id });
    expect(doc?.lock.quarantine.since).to.be.instanceOf(Date);
    expect(Math.abs(doc?.lock.quarantine.since.getTime() - before)).to.be.below(60_000);
    expect(doc?.lock.committed.map((record: { lock: string }) => record.lock), 'the commit record a lost reply is settled by').to.deep.equal([handle.id]);
  });

  it('every acquisition of the document is refused with Quarantined (409, data.reason, since, until): every tag and kind, wait, fair, owners', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const until = new Date(Date.now() + 600_000);
    await (await lock.acquire({ _id: 1 })).quarantine({ reason: 'bad row', until });
    const tagged = multiLock({ collection, locktimeouts: { read: 5_000, write: 5_000 } });
    const permits = semaphore({ collection, limit: 3 });
    const fair = writeLock({ collection, fair: true });
    const attempts: Array<[string, () => Promise<unknown>]> = [
      ['writeLock', () => lock.acquire({ _id: 1 })],
      ['writeLock with wait', () => lock.acquire({ _id: 1 }, { wait: 20_000 })],
      ['writeLock fair with wait', () => fair.acquire({ _id: 1 }, { wait: 20_000 })],
      ['writeLock with an owner', () => lock.acquire({ _id: 1 }, { owner: 'job-7', wait: 20_000 })],
      ['multiLock read (shared)', () => tagged.acquire({ _id: 1 }, { tag: 'read', wait: 20_000 })],
      ['multiLock write', () => tagged.acquire({ _id: 1 }, { tag: 'write' })],
      ['semaphore', () => permits.acquire({ _id: 1 }, { permits: 2, wait: 20_000 })],
      ['using', () => lock.using({ _id: 1 }, { wait: 20_000 }, () => 'ran')],
    ];
    for (const [name, attempt] of attempts) {
      const refused = await rejectionOf(attempt());
      expect(isLockError(refused, 'Quarantined'), `${name}: ${refused.message}`).to.equal(true);
      expect(refused.statusCode, name).to.equal(409);
      expect(refused.data, name).to.deep.equal({ reason: 'bad row', since: (await collection.findOne({ _id: 1 as never }))?.lock.quarantine.since, until });
    }
    expect(await entriesOf(collection, 1), 'nothing was acquired').to.deep.equal([]);
    const boomed = await rejectionOf(writeLock({ collection, boom: Boom }).acquire({ _id: 1 }));
    expect(Boom.isBoom(boomed) && boomed.output.statusCode).to.equal(409);
    expect(isLockError(boomed, 'Quarantined')).to.equal(true);
    expect((boomed as unknown as Boom.Boom).data.reason).to.equal('bad row');
  });

  it('Quarantined wins over a held lock of another tag: a shared lock still held beside the mark does not turn the refusal into a wait', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    // `audit` is concurrent with `write`: its lock may be held while a write lock quarantines.
    const tagged = multiLock({ collection, locktimeouts: { write: 10_000, audit: 10_000 }, lockRelationships: { write: { cooperative: ['write'] }, audit: { cooperative: ['audit'] } } });
    // Held by another client: a lock held in this process would let the first refusal go unexplained (a conflict, as far as this process can tell).
    const audit = await multiLock({ collection: await viaNewClient(collection), locktimeouts: { write: 10_000, audit: 10_000 }, lockRelationships: { write: { cooperative: ['write'] }, audit: { cooperative: ['audit'] } } }).acquire({ _id: 1 }, { tag: 'audit' });
    await (await tagged.acquire({ _id: 1 }, { tag: 'write' })).quarantine({ reason: 'stop' });
    const refused = await rejectionOf(tagged.acquire({ _id: 1 }, { tag: 'audit', wait: 20_000 }));
    expect(isLockError(refused, 'Quarantined'), refused.message).to.equal(true);
    await audit.release();
  });

  it('many clients racing to acquire a quarantined document never get it', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    await (await writeLock({ collection }).acquire({ _id: 1 })).quarantine({ reason: 'poisoned' });
    const racers = await Promise.all(Array.from({ length: 8 }, async () => writeLock({ collection: await viaNewClient(collection) })));
    const outcomes = await Promise.allSettled(racers.flatMap((racer) => [racer.acquire({ _id: 1 }), racer.acquire({ _id: 1 }, { wait: 5_000 })]));
    for (const outcome of outcomes) {
      expect(outcome.status).to.equal('rejected');
      if (outcome.status === 'rejected') expect(isLockError(outcome.reason, 'Quarantined'), String(outcome.reason)).to.equal(true);
    }
    expect(await entriesOf(collection, 1)).to.deep.equal([]);
  });

  it('under contention from many clients (writeLock, multiLock read/write, semaphore), nothing is acquired once the mark lands: the fencing counter stops there', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const kinds = async (): Promise<Array<(wait: number) => Promise<LockHandle>>> => {
      const own = await viaNewClient(collection);
      const write = writeLock({ collection: own, locktimeout: 5_000 });
      const tagged = multiLock({ collection: own, locktimeouts: { read: 5_000, write: 5_000 } });
      const permits = semaphore({ collection: own, limit: 2, locktimeout: 5_000 });
      return [(wait) => write.acquire({ _id: 1 }, { wait }), (wait) => tagged.acquire({ _id: 1 }, { tag: 'read', wait }), (wait) => tagged.acquire({ _id: 1 }, { tag: 'write', wait }), (wait) => permits.acquire({ _id: 1 }, { wait })];
    };
    const clients = await Promise.all(Array.from({ length: 6 }, kinds));
    const acquired: number[] = [];
    const refusedAfter: string[] = [];
    let marked: Promise<void> | undefined;
    let markFence = 0;
    let markLanded = false;
    const afterMark: number[] = [];
    let stop = false;
    const worker = async (acquire: Array<(wait: number) => Promise<LockHandle>>, index: number): Promise<void> => {
      for (let round = 0; !stop; round++) {
        const startedAfterMark = markLanded;
        const kind = (index + round) % acquire.length;
        try {
          const handle = await acquire[kind]!(200);
          acquired.push(handle.fence);
          if (startedAfterMark) afterMark.push(handle.fence);
          // A writeLock hold (kind 0) after the first four holds of the run quarantines its document; every other hold is released.
          if (!marked && kind === 0 && acquired.length >= 5) {
            markFence = handle.fence;
            marked = handle.quarantine({ reason: 'poisoned under load' });
            await marked;
            markLanded = true;
          } else await handle.release().catch(() => undefined);
        } catch (error) {
          if (isLockError(error, 'Quarantined')) refusedAfter.push(String(index));
          else if (!isLockError(error) || error.type !== 'conflict') throw error;
        }
        if (refusedAfter.length >= 12) stop = true;
      }
    };
    await Promise.all(clients.map((acquire, index) => worker(acquire, index)));
    const doc = await collection.findOne({ _id: 1 as never });
    expect(markFence, 'a write hold quarantined the document').to.be.greaterThan(0);
    expect(afterMark, 'acquisitions started after the mark landed that won').to.deep.equal([]);
    expect(doc?.lock.quarantine.by).to.be.a('string');
    expect(doc?.lock.fence, 'no acquisition after the mark: the counter stopped at the holds before it').to.equal(Math.max(...acquired));
    expect(await entriesOf(collection, 1), 'holds taken beside it (read, permits) were released by their holders; nothing new').to.deep.equal([]);
    expect(new Set(refusedAfter).size, 'every client was refused with Quarantined').to.equal(6);
  });

  for (const fair of [false, true]) {
    it(`waiters already waiting (here and in other clients${fair ? ', fair mode with tickets' : ''}) are woken and refused; none of them acquires`, async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection, locktimeout: 30_000, fair });
      const held = await lock.acquire({ _id: 1 });
      const others = await Promise.all(Array.from({ length: 3 }, async () => writeLock({ collection: await viaNewClient(collection), locktimeout: 30_000, fair })));
      const waiting = [lock, lock, ...others].map((each) => each.acquire({ _id: 1 }, { wait: 25_000 }).then(
        (won: LockHandle) => ({ won }),
        (error: unknown) => ({ error }),
      ));
      await sleep(300); // they are refused and asleep
      await held.quarantine({ reason: 'poisoned' });
      const started = Date.now();
      const outcomes = await Promise.all(waiting);
      for (const outcome of outcomes) {
        expect('error' in outcome && isLockError(outcome.error, 'Quarantined'), JSON.stringify(outcome)).to.equal(true);
      }
      expect(Date.now() - started, 'refused, not waited out (25 s)').to.be.below(20_000);
      console.log(`      refused ${Date.now() - started} ms after the mark`);
      expect(await entriesOf(collection, 1)).to.deep.equal([]);
    });
  }

  it('acquireAll with a quarantined member is refused with Quarantined, holding nothing', async () => {
    const collection = await freshCollection([{ _id: 'a' }, { _id: 'b' }, { _id: 'c' }]);
    const lock = writeLock({ collection });
    await (await lock.acquire({ _id: 'b' })).quarantine({ reason: 'bad' });
    for (const wait of [0, 5_000]) {
      const refused = await rejectionOf(acquireAll([{ lock, filter: { _id: 'a' } }, { lock, filter: { _id: 'b' } }, { lock, filter: { _id: 'c' } }], { wait }));
      expect(isLockError(refused, 'Quarantined'), refused.message).to.equal(true);
      for (const id of ['a', 'b', 'c']) expect(await entriesOf(collection, id), `${id} (wait ${wait})`).to.deep.equal([]);
    }
  });

  it('a filter that matches several documents takes the first one that is free and not quarantined', async () => {
    const collection = await freshCollection([{ _id: 1, queue: 'in' }, { _id: 2, queue: 'in' }, { _id: 3, queue: 'in' }]);
    const lock = writeLock({ collection });
    await (await lock.acquire({ _id: 1 })).quarantine({ reason: 'bad' });
    const held = await lock.acquire({ _id: 2 });
    const next = await lock.acquire({ queue: 'in' });
    expect((await entriesOf(collection, 3)).map((entry) => (entry as { id: string }).id)).to.deep.equal([next.id]);
    await Promise.all([held.release(), next.release()]);
  });

  it('inspect shows a live mark, and an acquisition refused at once says nothing else was written', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 1 });
    expect((await lock.inspect({ _id: 1 })).quarantine).to.equal(null);
    await handle.quarantine({ reason: 'bad', until: new Date(Date.now() + 60_000) });
    const seen = await lock.inspect({ _id: 1 });
    expect(seen.quarantine).to.deep.include({ reason: 'bad', by: handle.id });
    expect(seen.quarantine?.until).to.be.instanceOf(Date);
    const before = await snapshotOf(collection);
    await rejectionOf(lock.acquire({ _id: 1 }));
    expect(await snapshotOf(collection)).to.equal(before);
  });

  it('the mark ends at `until` by the server\'s clock: the document is acquirable again', async () => {
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection });
    await (await lock.acquire({ _id: 1 })).quarantine({ reason: 'cool down', until: new Date(Date.now() + 1_000) });
    expect(isLockError(await rejectionOf(lock.acquire({ _id: 1 })), 'Quarantined')).to.equal(true);
    // The server's clock passes `until` (far past it by the local clock, whatever the skew allowed).
    await sleep(1_500);
    const again = await lock.acquire({ _id: 1 }, { wait: 5_000 });
    expect((await lock.inspect({ _id: 1 })).quarantine).to.equal(null);
    await again.release();
    // A mark whose `until` has passed already refuses nothing.
    await (await lock.acquire({ _id: 2 })).quarantine({ reason: 'past', until: new Date(Date.now() - 60_000) });
    await (await lock.acquire({ _id: 2 })).release();
  });

  it('clearQuarantine(filter) removes the mark in one update and resolves whether there was one', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection });
    const tagged = multiLock({ collection, locktimeouts: { read: 5_000, write: 5_000 } });
    await (await lock.acquire({ _id: 1 })).quarantine({ reason: 'bad' });
    const { result, commands } = await commandsSentBy(() => tagged.clearQuarantine({ _id: 1 }));
    expect(result).to.equal(true);
    expect(commands).to.deep.equal(['update']);
    expect((await collection.findOne({ _id: 1 as never }))?.lock).to.not.have.property('quarantine');
    expect(await lock.clearQuarantine({ _id: 1 })).to.equal(false);
    expect(await lock.clearQuarantine({ _id: 'none' })).to.equal(false);
    await (await tagged.acquire({ _id: 1 }, { tag: 'read' })).release();
    await (await lock.acquire({ _id: 1 })).release();
  });

  it('a quarantine whose reply is lost is settled as a commit: it resolves when it landed (its record is there), and the mark stays', async () => {
    const collection = await freshCollection([{ _id: 1, state: 'new' }]);
    // The quarantining write lands; its reply never comes back (the call's deadline passes).
    const lossy = delayedCollection(collection, { reply: (method, _n, args) => (isCommit(method, args) ? never : undefined) });
    const lock = writeLock({ collection: lossy, locktimeout: 10_000, timeout: 2_000 });
    const handle = await lock.acquire({ _id: 1 });
    await handle.quarantine({ reason: 'bad', update: { $set: { state: 'failed' } } });
    const doc = await collection.findOne({ _id: 1 as never });
    expect(doc?.state).to.equal('failed');
    expect(doc?.lock.quarantine).to.deep.include({ reason: 'bad', by: handle.id });
    expect(isLockError(await rejectionOf(writeLock({ collection }).acquire({ _id: 1 })), 'Quarantined')).to.equal(true);
  });

  it('a lock that was lost leaves no mark: LockWasReacquired, nothing written', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 200 });
    const lost = await lock.acquire({ _id: 1 });
    await sleep(400);
    const next = await lock.acquire({ _id: 1 });
    const before = await snapshotOf(collection);
    const refused = await rejectionOf(lost.quarantine({ reason: 'too late', update: { $set: { x: 1 } } }));
    expect(isLockError(refused, 'LockWasReacquired'), refused.message).to.equal(true);
    expect(await snapshotOf(collection)).to.equal(before);
    await next.release();
  });

  it('bad input and locks that do not hold their document alone are refused with a TypeError, before anything is written', async () => {
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }, { _id: 3 }]);
    const lock = writeLock({ collection, locktimeout: 30_000 });
    const tagged = multiLock({ collection, locktimeouts: { read: 30_000, write: 30_000 } });
    const permits = semaphore({ collection, limit: 2, locktimeout: 30_000 });
    const held = await lock.acquire({ _id: 1 });
    const reader = await tagged.acquire({ _id: 2 }, { tag: 'read' });
    const permit = await permits.acquire({ _id: 3 });
    const before = await snapshotOf(collection);
    const cases: Array<[string, () => unknown, RegExp]> = [
      ['no params', () => (held.quarantine as (params?: unknown) => Promise<void>)(), /params/],
      ['no reason', () => held.quarantine({} as never), /params\.reason/],
      ['an empty reason', () => held.quarantine({ reason: ' ' }), /params\.reason/],
      ['a reason that is no string', () => held.quarantine({ reason: 42 as never }), /params\.reason/],
      ['an until that is no Date', () => held.quarantine({ reason: 'x', until: Date.now() + 1000 as never }), /params\.until/],
      ['an invalid Date', () => held.quarantine({ reason: 'x', until: new Date(NaN) }), /params\.until/],
      ['an unknown key', () => held.quarantine({ reason: 'x', untill: new Date() } as never), /params\.untill.*until/s],
      ['a session', () => held.quarantine({ reason: 'x', session: {} } as never), /session/],
      ['an update of the lock field', () => held.quarantine({ reason: 'x', update: { $set: { 'lock.quarantine': 1 } } }), /lock/],
      ['match without update', () => held.quarantine({ reason: 'x', match: { a: 1 } }), /match/],
      ['a shared tag', () => reader.quarantine({ reason: 'x' }), /shared/],
      ['a semaphore permit', () => permit.quarantine({ reason: 'x' }), /semaphore/],
    ];
    for (const [name, call, message] of cases) {
      const error = await failureOf(call);
      expect(error, name).to.be.instanceOf(TypeError);
      expect(error.message, name).to.match(message);
    }
    expect(await snapshotOf(collection), 'nothing written').to.equal(before);
    await held.release();
    const byOwner = await lock.acquire({ _id: 1 }, { owner: 'job' });
    const ownerError = await failureOf(() => byOwner.quarantine({ reason: 'x' }));
    expect(ownerError).to.be.instanceOf(TypeError);
    expect(ownerError.message).to.match(/owner/);
    await Promise.all([byOwner.release(), reader.release(), permit.release()]);
  });

  describe('from a using() body: return quarantine(reason, options)', () => {
    it('ends the hold with the mark and the update in one write (no release before it), and using() resolves options.value', async () => {
      const collection = await freshCollection([{ _id: 1, state: 'new' }]);
      const lock = writeLock({ collection, locktimeout: 10_000 });
      let holder = '';
      const { result, commands } = await commandsSentBy(() =>
        lock.using({ _id: 1 }, {}, (handle) => {
          holder = handle.id;
          return quarantine('cannot parse', { update: { $set: { state: 'failed' } }, until: new Date(Date.now() + 60_000), value: 'quarantined' });
        }),
      );
      expect(result).to.equal('quarantined');
      expect(commands, 'the acquisition, then one write').to.deep.equal(['findAndModify', 'update']);
      const doc = await collection.findOne({ _id: 1 as never });
      expect(doc?.state).to.equal('failed');
      expect(doc?.lock.tags.write).to.deep.equal([]);
      expect(doc?.lock.quarantine).to.deep.include({ reason: 'cannot parse', by: holder });
      expect(isLockError(await rejectionOf(lock.acquire({ _id: 1 })), 'Quarantined')).to.equal(true);
    });

    it('bad reason or options are refused with a TypeError when quarantine() is called; a shared lock\'s using() rejects with a TypeError and releases, leaving no mark', async () => {
      for (const [name, call] of [
        ['an empty reason', () => quarantine('')],
        ['a reason that is no string', () => quarantine(7 as never)],
        ['an until that is no Date', () => quarantine('x', { until: '2030-01-01' as never })],
        ['an unknown option', () => quarantine('x', { untill: new Date() } as never)],
        ['a session', () => quarantine('x', { session: {} } as never)],
      ] as const) {
        expect(await failureOf(call), name).to.be.instanceOf(TypeError);
      }
      const collection = await freshCollection([{ _id: 1 }]);
      const tagged = multiLock({ collection, locktimeouts: { read: 10_000, write: 10_000 } });
      const refused = await rejectionOf(tagged.using({ _id: 1 }, { tag: 'read' }, () => quarantine('x')));
      expect(refused).to.be.instanceOf(TypeError);
      expect(refused.message).to.match(/shared/);
      const doc = await collection.findOne({ _id: 1 as never });
      expect(doc?.lock.tags.read, 'released').to.deep.equal([]);
      expect(doc?.lock).to.not.have.property('quarantine');
    });

    it('a usingAll() body or a locked hapi route that returns quarantine() is refused (TypeError, 500): nothing written, every lock released', async () => {
      const collection = await freshCollection([{ _id: 'a', balance: 100 }, { _id: 'b' }]);
      const lock = writeLock({ collection, locktimeout: 10_000 });
      const group = await rejectionOf(usingAll([{ lock, filter: { _id: 'a' } }, { lock, filter: { _id: 'b' } }], {}, () => quarantine('x') as never));
      expect(group).to.be.instanceOf(TypeError);
      expect(group.message).to.match(/usingAll\(\).*quarantine/);
      const server = await makeServer((s) =>
        s.route({
          method: 'POST',
          path: '/accounts/{id}',
          options: { plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } }, handler: () => quarantine('x', { update: { $set: { balance: 0 } } }) },
        }),
      );
      await server.initialize();
      expect((await server.inject({ method: 'POST', url: '/accounts/a' })).statusCode).to.equal(500);
      await released(collection, 'a');
      for (const doc of await collection.find().toArray()) {
        expect(doc.lock, String(doc._id)).to.not.have.property('quarantine');
        expect(doc.lock.tags.write, String(doc._id)).to.deep.equal([]);
      }
      expect((await collection.findOne({ _id: 'a' as never }))?.balance).to.equal(100);
      await stopServers();
    });
  });
});
