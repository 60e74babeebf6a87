/**
 * A typo never loosens a lock: in plain JavaScript (no compiler), every options and params object
 * refuses a key it does not know with a TypeError that names the key and the nearest known one,
 * before anything is written. Ignoring `lok` made a release a forced one; ignoring `wiat` made an
 * acquire fail fast; a relationship that named `wirte` declared a tag nobody holds.
 */
import { expect } from 'chai';
import { acquireAll, clearV2Locks, election, multiLock, quarantine, resourceLocks, semaphore, writeLock } from '../../lib';
import { instrumentMonglock } from '../../lib/otel';
import { failureOf, freshCollection, locksHoldingSomething, rejectionOf } from '../support/fixture';

/** A call made with a misspelled key: the key as named in the message, and the known key it should suggest. */
type Case = readonly [string, () => unknown, string, string | undefined];

describe('unknown keys: a typo never loosens a lock', () => {
  it('a misspelled proof (`lok`) is refused: the live lock is not force-released', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 'a' });
    const error = await rejectionOf(lock.release({ _id: 'a' }, { lok: handle } as never));
    expect(error).to.be.instanceOf(TypeError);
    expect(error.message).to.match(/`params\.lok`.*Did you mean `lock`\?/);
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
    await handle.release();
  });

  it('a misspelled update (`updaet`) is refused: nothing is written and the lock stays held', async () => {
    const collection = await freshCollection([{ _id: 'a', balance: 10 }]);
    const lock = writeLock({ collection });
    const handle = await lock.acquire({ _id: 'a' });
    const error = await rejectionOf(handle.release({ updaet: { $set: { balance: 0 } } } as never));
    expect(error).to.be.instanceOf(TypeError);
    expect(error.message).to.match(/`params\.updaet`.*Did you mean `update`\?/);
    expect((await collection.findOne({ _id: 'a' as never }))?.balance).to.equal(10);
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'still held').to.equal('LockAlreadyTaken');
    await handle.release({ update: { $set: { balance: 0 } } });
    expect((await collection.findOne({ _id: 'a' as never }))?.balance).to.equal(0);
  });

  it('a relationship naming an undeclared tag (`wirte`) is refused, so exclusion cannot be switched off', () => {
    const make = (): unknown =>
      multiLock({
        collection: {} as never,
        locktimeout: 5000,
        lockRelationships: { read: { cooperative: ['wirte'] }, write: { cooperative: ['write', 'read'] } },
      });
    expect(make).to.throw(TypeError, /Tag `wirte` in `options\.lockRelationships\.read\.cooperative` is not declared \(did you mean `write`\?\)/);
  });

  it('a writeLock or semaphore given a `tag` says it has no tags and that `tag` is a multiLock param (no "did you mean `w`"), and writes nothing', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const lock = writeLock({ collection });
    const pool = semaphore({ collection, limit: 2 });
    const held = await lock.acquire({ _id: 'a' });
    const calls: Array<[string, () => unknown, RegExp]> = [
      ['writeLock.acquire', () => lock.acquire({ _id: 'a' }, { tag: 'read' } as never), /a writeLock has no tags.*`tag` is a multiLock param/],
      ['writeLock.using', () => lock.using({ _id: 'a' }, { tag: 'read' } as never, () => 1), /a writeLock has no tags.*`tag` is a multiLock param/],
      ['writeLock.release', () => lock.release({ _id: 'a' }, { lock: held, tag: 'write' } as never), /a writeLock has no tags.*`tag` is a multiLock param/],
      ['semaphore.acquire', () => pool.acquire({ _id: 'a' }, { tag: 'read' } as never), /a semaphore has no tags.*`tag` is a multiLock param/],
    ];
    const wrong: string[] = [];
    for (const [name, call, expected] of calls) {
      const error = await failureOf(call);
      if (!(error instanceof TypeError) || !expected.test(error.message) || /Did you mean/.test(error.message)) wrong.push(`${name}: ${error.name}: ${error.message}`);
    }
    expect(wrong, 'the calls whose message misleads').to.deep.equal([]);
    expect((await rejectionOf(lock.acquire({ _id: 'a' }))).subtype, 'the lock is still held, by the same holder').to.equal('LockAlreadyTaken');
    await held.release();
  });

  it('a misspelled tag (`wirte`) is refused naming the declared tag it is nearest to, in acquire, using, convert and a group request, before anything is written', async () => {
    const collection = await freshCollection([{ _id: 'a' }]);
    const rw = multiLock({ collection, locktimeouts: { read: 5000, write: 5000 }, lockRelationships: { read: { cooperative: ['write'] } } });
    const reader = await rw.acquire({ _id: 'a' }, { tag: 'read' });
    const before = JSON.stringify(await collection.findOne({ _id: 'a' as never }));
    const calls: Array<[string, () => unknown]> = [
      // In plain JavaScript (TypeScript refuses `wirte`: the tags are typed from the options).
      ['acquire', () => rw.acquire({ _id: 'a' }, { tag: 'wirte' } as never)],
      ['using', () => rw.using({ _id: 'a' }, { tag: 'wirte' } as never, () => 1)],
      ['convert', () => reader.convert('wirte')],
      ['acquireAll', () => acquireAll([{ lock: rw, filter: { _id: 'a' }, tag: 'wirte' }])],
    ];
    const wrong: string[] = [];
    for (const [name, call] of calls) {
      const error = await failureOf(call);
      if (!(error instanceof TypeError) || !/Unknown tag `wirte`.*Did you mean `write`\?/.test(error.message)) wrong.push(`${name}: ${error.name}: ${error.message}`);
    }
    expect(wrong, 'the calls that do not suggest `write`').to.deep.equal([]);
    expect(JSON.stringify(await collection.findOne({ _id: 'a' as never })), 'nothing written').to.equal(before);
    await reader.release();
  });

  it('a tag declared only by its lease (v2 style) may be named in relationships', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const rw = multiLock({ collection, locktimeouts: { read: 5000, write: 5000 }, lockRelationships: { read: { cooperative: ['write'] } } });
    const writer = await rw.acquire({ _id: 1 }, { tag: 'write' });
    expect((await rejectionOf(rw.acquire({ _id: 1 }, { tag: 'read' }))).subtype).to.equal('CooperativeLock');
    await writer.release();
  });

  it('every options and params object refuses an unknown key, names the nearest known one, and writes nothing', async function () {
    this.timeout(30_000);
    const { docs, lockColl, wl, ml, rl, held, heldRead, resource, snapshot, before } = await locksHoldingSomething();
    const body = async (): Promise<number> => 1;

    const cases: Case[] = [
      ['writeLock options', () => writeLock({ collection: docs, lockTimeout: 5000 } as never), 'options.lockTimeout', 'locktimeout'],
      ['writeLock options: a multiLock option', () => writeLock({ collection: docs, locktimeouts: { write: 1 } } as never), 'options.locktimeouts', undefined],
      ['multiLock options', () => multiLock({ collection: docs, locktimeouts: { a: 1 }, lockRelationship: {} } as never), 'options.lockRelationship', 'lockRelationships'],
      ['multiLock relationship', () => multiLock({ collection: docs, locktimeout: 1, lockRelationships: { a: { coperative: ['a'] } } } as never), 'options.lockRelationships.a.coperative', 'cooperative'],
      ['resourceLocks options', () => resourceLocks({ collection: lockColl, gcafter: 1 } as never), 'options.gcafter', 'gcAfter'],
      ['resourceLocks options: fair', () => resourceLocks({ collection: lockColl, fair: true } as never), 'options.fair', undefined],
      ['clearV2Locks options', () => clearV2Locks(docs, { tag: ['read'] } as never), 'options.tag', 'tags'],
      ['instrumentMonglock options', () => instrumentMonglock({ tracerprovider: {} } as never), 'options.tracerprovider', 'tracerProvider'],
      ['election options', () => election({ collection: docs, leese: 1000 } as never), 'options.leese', 'lease'],
      ['election options: a lock\'s lease', () => election({ collection: docs, locktimeout: 1000 } as never), 'options.locktimeout', undefined],
      ['election.campaign', () => election({ collection: docs }).campaign({ _id: 'e' }, { wiat: 1 } as never), 'params.wiat', 'wait'],
      ['election.leader', () => election({ collection: docs }).leader({ _id: 'e' }, { timout: 1 } as never), 'params.timout', 'timeout'],
      ['election.observe', () => election({ collection: docs }).observe({ _id: 'e' }, { signl: undefined } as never), 'params.signl', 'signal'],
      ['writeLock.acquire', () => wl.acquire({ _id: 2 }, { wiat: 1000 } as never), 'params.wiat', 'wait'],
      ['writeLock.acquire: a per-lock option', () => wl.acquire({ _id: 2 }, { collection: lockColl } as never), 'params.collection', undefined],
      ['writeLock.using', () => wl.using({ _id: 2 }, { maxhold: 10 } as never, body), 'params.maxhold', 'maxHold'],
      ['writeLock.release', () => wl.release({ _id: 1 }, { lok: held } as never), 'params.lok', 'lock'],
      ['writeLock.release: a lease', () => wl.release({ _id: 1 }, { lock: held, locktimeout: 1 } as never), 'params.locktimeout', undefined],
      ['writeLock.extend', () => wl.extend({ _id: 1 }, { lock: held, locktimeot: 1 } as never), 'params.locktimeot', 'locktimeout'],
      ['multiLock.acquire', () => ml.acquire({ _id: 2 }, { tag: 'read', documnet: true } as never), 'params.documnet', 'document'],
      ['multiLock.acquire (continuation)', () => ml.acquire({ _id: 2 }, { lock: heldRead, wiat: 1 } as never), 'params.wiat', 'wait'],
      ['multiLock.using', () => ml.using({ _id: 2 }, { tag: 'read', signl: undefined } as never, body), 'params.signl', 'signal'],
      ['multiLock.release', () => ml.release({ _id: 2 }, { lock: heldRead, updte: {} } as never), 'params.updte', 'update'],
      ['multiLock.extend', () => ml.extend({ _id: 2 }, { lock: heldRead, timout: 1 } as never), 'params.timout', 'timeout'],
      ['handle.release', () => held.release({ updaet: { $set: { v: 'x' } } } as never), 'params.updaet', 'update'],
      ['handle.extend', () => held.extend(1000, { W: 1 } as never), 'params.W', 'w'],
      ['handle.quarantine', () => held.quarantine({ reason: 'x', untill: new Date() } as never), 'params.untill', 'until'],
      ['quarantine() options', () => quarantine('x', { udpate: {} } as never), 'options.udpate', 'update'],
      ['writeLock.clearQuarantine', () => wl.clearQuarantine({ _id: 1 }, { timout: 1 } as never), 'params.timout', 'timeout'],
      ['xlock', () => rl.xlock('res2', 'g', { tll: 10 } as never), 'params.tll', 'ttl'],
      ['slock', () => rl.slock('res2', 'g', { ownr: 'me' } as never), 'params.ownr', 'owner'],
      ['slock: fair', () => rl.slock('res2', 'g', { fair: true } as never), 'params.fair', undefined],
      ['resource using', () => rl.using('res2', 'g', { sharred: true } as never, body), 'params.sharred', 'shared'],
      ['status filter', () => rl.status({ lockid: 'group' } as never), 'filter.lockid', 'lockId'],
      ['resource handle.release', () => resource.release({ wait: 1 } as never), 'params.wait', undefined],
      ['resource handle.extend', () => resource.extend(1000, { lockId: 'x' } as never), 'params.lockId', undefined],
    ];

    const wrong: string[] = [];
    for (const [name, call, key, nearest] of cases) {
      const error = await failureOf(call);
      const named = error instanceof TypeError && error.message.includes(`\`${key}\``);
      const suggested = nearest === undefined || error.message.includes(`Did you mean \`${nearest}\`?`);
      if (!named || !suggested) wrong.push(`${name}: ${error.name}: ${error.message}`);
    }
    expect(wrong).to.deep.equal([]);
    expect(await snapshot(), 'nothing written').to.equal(before);
    await Promise.all([held.release(), heldRead.release(), resource.release()]);
  });
});
