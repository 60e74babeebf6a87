import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { multiLock, writeLock } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('options and arguments', () => {
  describe('writeLock(options) throws before anything is written', () => {
    const cases: Array<[string, () => unknown, typeof TypeError | typeof RangeError, RegExp]> = [
      ['no options', () => writeLock(undefined as never), TypeError, /`options` to be an object/],
      ['no collection', () => writeLock({} as never), TypeError, /`options.collection` to be a MongoDB driver Collection/],
      ['collection name instead of Collection', () => writeLock({ collection: 'test' as never }), TypeError, /options.collection/],
    ];
    for (const [name, make, kind, message] of cases) {
      it(name, () => expect(make).to.throw(kind, message));
    }

    it('rejects bad numbers, w: 0, bad boom and unsafe field names with the argument named', async () => {
      const collection = await freshCollection();
      const bad: Array<[Record<string, unknown>, typeof TypeError | typeof RangeError, RegExp]> = [
        [{ locktimeout: 0 }, RangeError, /`options.locktimeout` to be between 1 and/],
        [{ locktimeout: -5 }, RangeError, /options.locktimeout/],
        [{ locktimeout: 'abc' }, TypeError, /Expected `options.locktimeout` to be an integer number of ms, got `abc` \(string\)/],
        [{ locktimeout: 1.5 }, TypeError, /options.locktimeout/],
        [{ locktimeout: 2 ** 40 }, RangeError, /options.locktimeout/],
        [{ timeout: 0 }, RangeError, /options.timeout/],
        [{ timeout: Number.NaN }, TypeError, /options.timeout/],
        [{ w: 0 }, RangeError, /0 cannot confirm a lock/],
        [{ w: 'some' }, TypeError, /options.w/],
        [{ boom: {} }, TypeError, /options.boom/],
        [{ field: 'a.b' }, TypeError, /options.field/],
        [{ field: '$set' }, TypeError, /options.field/],
        [{ field: '__proto__' }, TypeError, /options.field/],
        [{ field: '_id' }, TypeError, /options.field/],
        [{ Promise: {} }, TypeError, /options.Promise.resolve/],
        [{ clock: 5 }, TypeError, /options.clock/],
      ];
      for (const [options, kind, message] of bad) {
        expect(() => writeLock({ collection, ...options }), JSON.stringify(options)).to.throw(kind, message);
      }
    });

    it('honours explicit values instead of replacing them with defaults, and never mutates them', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const options = Object.freeze({ collection, locktimeout: 1, timeout: 5000, w: 1, boom: Boom });
      const lock = writeLock(options);
      // A lease long enough for a loaded machine's round trip: the property is which value wins, not its size.
      const params = Object.freeze({ locktimeout: 4_000, w: 1 as const });
      const handle = await lock.acquire(Object.freeze({ _id: 1 }), params);
      expect(handle.expiresAt - handle.timestamp).to.equal(4_000);
      expect(params).to.deep.equal({ locktimeout: 4_000, w: 1 });
    });
  });

  describe('lock calls reject bad arguments before anything is written', () => {
    it('writeLock', async () => {
      const collection = await freshCollection([{ _id: 1, v: 1 }]);
      const before = await collection.find().toArray();
      const lock = writeLock({ collection });
      const calls: Array<[() => PromiseLike<unknown>, RegExp]> = [
        [() => lock.acquire(null as never), /`filter` to be an object, got `null` \(null\)/],
        [() => lock.acquire('id' as never), /`filter` to be an object/],
        [() => lock.acquire([{ _id: 1 }] as never), /`filter` to be an object, got .* \(array\)/],
        [() => lock.acquire({ _id: 1 }, 5 as never), /`params` to be an object/],
        [() => lock.acquire({ _id: 1 }, { locktimeout: 0 }), /params.locktimeout/],
        [() => lock.acquire({ _id: 1 }, { timeout: -1 }), /params.timeout/],
        [() => lock.acquire({ _id: 1 }, { w: 0 }), /params.w/],
        [() => lock.release({ _id: 1 }, { timestamp: -1 }), /params.timestamp/],
        [() => lock.release({ _id: 1 }, { timestamp: 'x' as never }), /params.timestamp/],
        [() => lock.release({ _id: 1 }, { lock: { id: { $ne: '' }, tag: 'write' } as never }), /params.lock.id/],
        [() => lock.release({ _id: 1 }, { lock: { id: 'a.b', tag: 'write' } as never }), /params.lock.id/],
        [() => lock.release({ _id: 1 }, { lock: { id: 'a'.repeat(32), tag: 'read' } as never }), /params.lock.tag/],
        [() => lock.release({ _id: 1 }, { lock: { id: 'a'.repeat(32), tag: 'write', fence: -1 } as never }), /params.lock.fence/],
        [() => lock.extend({ _id: 1 }, {}), /params.lock` or `params.timestamp/],
      ];
      for (const [call, message] of calls) {
        const error = await rejectionOf(call());
        expect(error instanceof TypeError || error instanceof RangeError, `${message.source}: ${error.message}`).to.equal(true);
        expect(error.message).to.match(message);
      }
      expect(await collection.find().toArray()).to.deep.equal(before);
    });

    it('multiLock', async () => {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = multiLock({ collection, locktimeouts: { a: 1000 } });
      const calls: Array<[() => PromiseLike<unknown>, RegExp]> = [
        [() => lock.acquire({ _id: 1 }, undefined as never), /`params.tag` \(one of a\): a multiLock acquisition needs `\{ tag \}`/],
        [() => lock.acquire({ _id: 1 }, {}), /params.tag/],
        [() => lock.acquire({ _id: 1 }, { tag: 'b' } as never), /Unknown tag `b`/],
        [() => lock.acquire({ _id: 1 }, { tag: 'a.b' } as never), /params.tag/],
        [() => lock.acquire({ _id: 1 }, { tag: '$where' } as never), /params.tag/],
        [() => lock.release({ _id: 1 }, {} as never), /params.lock/],
        [() => lock.release({ _id: 1 }, { lock: { id: 7, tag: 'a' } as never }), /params.lock.id/],
      ];
      for (const [call, message] of calls) {
        const error = await rejectionOf(call());
        expect(error).to.be.instanceOf(TypeError);
        expect(error.message).to.match(message);
      }
      expect(await collection.find().toArray()).to.deep.equal([{ _id: 1 }]);
    });
  });
});
