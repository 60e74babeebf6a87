import { expect } from 'chai';
import { multiLock, resourceLocks, writeLock } from '../../lib';
import { failureOf, locksHoldingSomething } from '../support/fixture';

type Case = readonly [string, () => unknown, RegExp];

describe('bad input: every public function and option, nothing written', () => {
  it('at least 50 invalid calls each fail with a clear message naming the argument; the collections are byte-for-byte unchanged', async function () {
    this.timeout(60_000);
    const { docs, lockColl, wl, ml, rl, held, heldRead, snapshot, before } = await locksHoldingSomething();

    const big = 2 ** 40;
    const cases: Case[] = [
      // writeLock(options)
      ['writeLock: no options', () => writeLock(undefined as never), /`options`/],
      ['writeLock: options is a string', () => writeLock('x' as never), /`options`/],
      ['writeLock: collection missing', () => writeLock({} as never), /`options.collection`/],
      ['writeLock: collection is a name', () => writeLock({ collection: 'orders' as never }), /`options.collection`/],
      ['writeLock: locktimeout 0', () => writeLock({ collection: docs, locktimeout: 0 }), /`options.locktimeout`/],
      ['writeLock: locktimeout negative', () => writeLock({ collection: docs, locktimeout: -1 }), /`options.locktimeout`/],
      ['writeLock: locktimeout huge', () => writeLock({ collection: docs, locktimeout: big }), /`options.locktimeout`/],
      ['writeLock: locktimeout string', () => writeLock({ collection: docs, locktimeout: '10' as never }), /`options.locktimeout`/],
      ['writeLock: locktimeout NaN', () => writeLock({ collection: docs, locktimeout: Number.NaN }), /`options.locktimeout`/],
      ['writeLock: timeout fraction', () => writeLock({ collection: docs, timeout: 0.5 }), /`options.timeout`/],
      ['writeLock: w 0', () => writeLock({ collection: docs, w: 0 }), /`options.w`/],
      ['writeLock: w -1', () => writeLock({ collection: docs, w: -1 }), /`options.w`/],
      ['writeLock: w object', () => writeLock({ collection: docs, w: {} as never }), /`options.w`/],
      ['writeLock: boom without helpers', () => writeLock({ collection: docs, boom: { conflict: () => new Error() } as never }), /`options.boom`/],
      ['writeLock: field with a dot', () => writeLock({ collection: docs, field: 'a.b' }), /`options.field`/],
      ['writeLock: field with $', () => writeLock({ collection: docs, field: '$inc' }), /`options.field`/],
      ['writeLock: field __proto__', () => writeLock({ collection: docs, field: '__proto__' }), /`options.field`/],
      ['writeLock: field constructor', () => writeLock({ collection: docs, field: 'constructor' }), /`options.field`/],
      ['writeLock: field empty', () => writeLock({ collection: docs, field: '' }), /`options.field`/],
      ['writeLock: Promise without resolve', () => writeLock({ collection: docs, Promise: {} as never }), /`options.Promise.resolve`/],
      ['writeLock: clock not a function', () => writeLock({ collection: docs, clock: 1 as never }), /`options.clock`/],
      // writeLock methods
      ['acquire: filter null', () => wl.acquire(null as never), /`filter`/],
      ['acquire: filter with an invalid $and', () => wl.acquire({ _id: 2, $and: {} } as never), /DbError/],
      ['acquire: filter string', () => wl.acquire('1' as never), /`filter`/],
      ['acquire: filter array', () => wl.acquire([] as never), /`filter`/],
      ['acquire: filter number', () => wl.acquire(1 as never), /`filter`/],
      ['acquire: params string', () => wl.acquire({ _id: 2 }, 'x' as never), /`params`/],
      ['acquire: locktimeout 0', () => wl.acquire({ _id: 2 }, { locktimeout: 0 }), /`params.locktimeout`/],
      ['acquire: timeout huge', () => wl.acquire({ _id: 2 }, { timeout: big }), /`params.timeout`/],
      ['acquire: w 0', () => wl.acquire({ _id: 2 }, { w: 0 }), /`params.w`/],
      ['acquire: wait negative', () => wl.acquire({ _id: 2 }, { wait: -1 }), /`params.wait`/],
      ['acquire: signal not a signal', () => wl.acquire({ _id: 2 }, { signal: {} as never }), /`params.signal`/],
      ['release: timestamp negative', () => wl.release({ _id: 1 }, { timestamp: -5 }), /`params.timestamp`/],
      ['release: timestamp fraction', () => wl.release({ _id: 1 }, { timestamp: 1.5 }), /`params.timestamp`/],
      ['release: lock without id', () => wl.release({ _id: 1 }, { lock: { tag: 'write' } as never }), /`params.lock.id`/],
      ['release: lock id is an operator object', () => wl.release({ _id: 1 }, { lock: { ...held.toJSON(), id: { $ne: '' } } as never }), /`params.lock.id`/],
      ['release: lock id with a dot', () => wl.release({ _id: 1 }, { lock: { ...held.toJSON(), id: 'a.b' } }), /`params.lock.id`/],
      ['release: lock tag edited', () => wl.release({ _id: 1 }, { lock: { ...held.toJSON(), tag: 'read' } }), /`params.lock.tag`/],
      ['release: lock fence edited to a string', () => wl.release({ _id: 1 }, { lock: { ...held.toJSON(), fence: '9' as never } }), /`params.lock.fence`/],
      ['release: handle from another document', () => wl.release({ _id: 2 }, { lock: held }), /LockNotFound/],
      ['release: handle id edited by hand', () => wl.release({ _id: 1 }, { lock: { ...held.toJSON(), id: '0'.repeat(32) } }), /LockWasReacquired|LockNotFound/],
      ['extend: no proof', () => wl.extend({ _id: 1 }, {}), /`params.lock` or `params.timestamp`/],
      ['extend: locktimeout 0', () => wl.extend({ _id: 1 }, { lock: held, locktimeout: 0 }), /`params.locktimeout`/],
      ['extend: handle from another document', () => wl.extend({ _id: 2 }, { lock: held }), /LockNotFound|LockWasReacquired/],
      ['using: body not a function', () => wl.using({ _id: 2 }, {}, 'go' as never), /`body`/],
      ['using: filter null', () => wl.using(null as never, {}, async () => 1), /`filter`/],
      ['handle.extend: negative', () => held.extend(-1), /`locktimeout`/],
      ['handle.extend: a string names the positional argument', () => held.extend('5000' as never), /^Expected `locktimeout` to be an integer number of ms, got `5000` \(string\)$/],
      ['writeLock: locktimeout Infinity is shown as such', () => writeLock({ collection: docs, locktimeout: Infinity }), /got `Infinity` \(number\)/],
      ['handle.guard: extra not an object', () => held.guard('x' as never), /`extra`/],
      ['handle.quarantine: no params', () => held.quarantine(undefined as never), /`params`/],
      ['handle.quarantine: reason missing', () => held.quarantine({} as never), /`params.reason`/],
      ['handle.quarantine: until a number', () => held.quarantine({ reason: 'x', until: 1 as never }), /`params.until`/],
      ['handle.quarantine: update of the lock field', () => held.quarantine({ reason: 'x', update: { $unset: { lock: '' } } }), /`params.update`/],
      ['handle.quarantine: a shared tag', () => heldRead.quarantine({ reason: 'x' }), /shared/],
      ['clearQuarantine: filter null', () => wl.clearQuarantine(null as never), /`filter`/],
      ['clearQuarantine: params a string', () => ml.clearQuarantine({ _id: 2 }, 'x' as never), /`params`/],
      // multiLock(options)
      ['multiLock: no tags', () => multiLock({ collection: docs }), /at least one tag/],
      ['multiLock: locktimeouts array', () => multiLock({ collection: docs, locktimeouts: [] as never }), /`options.locktimeouts`/],
      ['multiLock: lease 0', () => multiLock({ collection: docs, locktimeouts: { a: 0 } }), /`options.locktimeouts.a`/],
      ['multiLock: unsafe tag $', () => multiLock({ collection: docs, locktimeouts: { $a: 10 } }), /locktimeouts key/],
      ['multiLock: unsafe tag __proto__', () => multiLock({ collection: docs, locktimeouts: JSON.parse('{"__proto__":10}') }), /locktimeouts key/],
      ['multiLock: tag too long', () => multiLock({ collection: docs, locktimeouts: { ['a'.repeat(65)]: 10 } }), /locktimeouts key/],
      ['multiLock: a relationship key outside locktimeouts', () => multiLock({ collection: docs, locktimeouts: { a: 10 }, lockRelationships: { a: { cooperative: ['b'] }, b: {} } as never }), /Tag `b` in `options.lockRelationships` is not declared/],
      ['multiLock: relationship to an undeclared tag', () => multiLock({ collection: docs, locktimeouts: { a: 10 }, lockRelationships: { a: { cooperative: ['b'] } } }), /Tag `b` .* is not declared/],
      ['multiLock: self-assertive', () => multiLock({ collection: docs, locktimeout: 10, lockRelationships: { a: { assertive: ['a'] } } }), /cycle/],
      ['multiLock: assertive cycle', () => multiLock({ collection: docs, locktimeout: 10, lockRelationships: { a: { assertive: ['b'] }, b: { assertive: ['a'] } } }), /cycle/],
      ['multiLock: contradiction', () => multiLock({ collection: docs, locktimeout: 10, lockRelationships: { a: { cooperative: ['b'], assertive: ['b'] }, b: {} } }), /both cooperative/],
      ['multiLock: relationship list not an array', () => multiLock({ collection: docs, locktimeout: 10, lockRelationships: { a: { cooperative: 'b' as never } } }), /cooperative/],
      // multiLock methods
      ['multiLock.acquire: no params', () => ml.acquire({ _id: 2 }, undefined as never), /`params.tag`.*needs `\{ tag \}`/],
      ['multiLock.acquire: no tag', () => ml.acquire({ _id: 2 }, {}), /`params.tag`/],
      ['multiLock.acquire: unknown tag', () => ml.acquire({ _id: 2 }, { tag: 'admin' }), /Unknown tag `admin`/],
      ['multiLock.acquire: tag injection', () => ml.acquire({ _id: 2 }, { tag: 'read.$[]' }), /`params.tag`/],
      ['multiLock.acquire: lock with unknown tag', () => ml.acquire({ _id: 2 }, { lock: { ...heldRead.toJSON(), tag: 'x' } }), /`params.lock.tag`/],
      ['multiLock.release: no lock', () => ml.release({ _id: 1 }, {} as never), /`params.lock`/],
      ['multiLock.release: handle from another document', () => ml.release({ _id: 1 }, { lock: heldRead }), /LockNotFound/],
      ['multiLock.extend: lock not an object', () => ml.extend({ _id: 1 }, { lock: 'x' as never }), /`params.lock`/],
      ['multiLock.using: no tag', () => ml.using({ _id: 2 }, {} as never, async () => 1), /`params.tag`/],
      // resourceLocks
      ['resourceLocks: field option', () => resourceLocks({ collection: lockColl, field: 'x' } as never), /`options.field`/],
      ['resourceLocks: gcAfter 0', () => resourceLocks({ collection: lockColl, gcAfter: 0 }), /`options.gcAfter`/],
      ['xlock: resource empty', () => rl.xlock('', 'g'), /`resource`/],
      ['xlock: resource object', () => rl.xlock({ $ne: 1 } as never, 'g'), /`resource`/],
      ['xlock: lockId number', () => rl.xlock('res2', 7 as never), /`lockId`/],
      ['xlock: ttl 0', () => rl.xlock('res2', 'g', { ttl: 0 }), /`params.ttl`/],
      ['xlock: owner object', () => rl.xlock('res2', 'g', { owner: {} as never }), /`params.owner`/],
      ['slock: maxConcurrent 0', () => rl.slock('res2', 'g', {}, 0), /`maxConcurrent`/],
      ['slock: maxConcurrent fraction', () => rl.slock('res2', 'g', {}, 0.5), /`maxConcurrent`/],
      ['unlock: lockId empty', () => rl.unlock(''), /`lockId`/],
      ['renew: ttl negative', () => rl.renew('group', -1), /`ttl`/],
      ['renew: unknown lock id', () => rl.renew('no-such-group', 1000), /LockNotFound/],
      ['status: filter string', () => rl.status('x' as never), /`filter`/],
      ['status: createdBefore string', () => rl.status({ createdBefore: '2020' as never }), /`filter.createdBefore`/],
      ['status: ttlBelow negative', () => rl.status({ ttlBelow: -1 }), /`filter.ttlBelow`/],
      ['purgeEvery: interval 0', () => rl.purgeEvery(0), /`intervalMs`/],
      ['using: shared with maxConcurrent 0', () => rl.using('res2', 'g', { shared: true, maxConcurrent: 0 }, async () => 1), /`maxConcurrent`/],
    ];

    const unclear: string[] = [];
    for (const [name, call, message] of cases) {
      const error = await failureOf(call);
      const kind = error instanceof TypeError || error instanceof RangeError || (error as { subtype?: string }).subtype !== undefined;
      if (!kind || !message.test(error.message)) unclear.push(`${name}: ${error.name}: ${error.message}`);
    }
    console.log(`      ${cases.length} invalid calls tried`);
    expect(cases.length).to.be.at.least(50);
    expect(unclear).to.deep.equal([]);
    expect(await snapshot()).to.equal(before);
  });
});
