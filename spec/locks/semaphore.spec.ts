/**
 * Counting semaphores: `semaphore({ limit })` and multiLock `limits`. Each holder is its own lock
 * (id, lease, fencing token, permits); the limit is stored in the document; every check is in the
 * acquisition's one update.
 */
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { isLockError, multiLock, semaphore, type LockHandle } from '../../lib';
import { LocalWaiters } from '../../lib/waiting/local-waiters';
import { failureOf, freshCollection, newClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';

describe('semaphore(options): counting permits in a document', () => {
  it('admits `limit` holders, each its own lock with its own id and fencing token; the next is refused SemaphoreFull (409 under boom)', async () => {
    const collection = await freshCollection([{ _id: 'export' }]);
    const exports = semaphore({ collection, limit: 3, locktimeout: 60_000 });
    const holders = [await exports.acquire({ _id: 'export' }), await exports.acquire({ _id: 'export' }), await exports.acquire({ _id: 'export' })];
    expect(new Set(holders.map((h) => h.id)).size).to.equal(3);
    expect(holders.map((h) => h.fence)).to.deep.equal([1, 2, 3]);
    expect(holders.map((h) => h.permits)).to.deep.equal([1, 1, 1]);
    const refused = await rejectionOf(exports.acquire({ _id: 'export' }));
    expect(refused.subtype).to.equal('SemaphoreFull');
    expect(refused.message).to.match(/3 of 3 permits/);
    const boomed = await rejectionOf(exports.acquire({ _id: 'export' }, { boom: Boom }));
    expect((boomed as unknown as Boom.Boom).output.statusCode).to.equal(409);
    expect(boomed.subtype).to.equal('SemaphoreFull');

    await holders[1]!.release();
    const next = await exports.acquire({ _id: 'export' });
    expect(next.fence).to.equal(4);
    expect((await rejectionOf(holders[1]!.release())).subtype, 'a release names one holder, once').to.equal('LockNotFound');
  });

  it('permits: a holder takes several; what is left is judged by the sum', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 3, locktimeout: 60_000 });
    const big = await pool.acquire({ _id: 1 }, { permits: 2 });
    expect(big.permits).to.equal(2);
    expect((await rejectionOf(pool.acquire({ _id: 1 }, { permits: 2 }))).message).to.match(/2 of 3 permits of tag permit are held, 2 asked/);
    const small = await pool.acquire({ _id: 1 }, { permits: 1 });
    expect((await rejectionOf(pool.acquire({ _id: 1 }))).subtype).to.equal('SemaphoreFull');
    await big.release();
    await (await pool.acquire({ _id: 1 }, { permits: 2 })).release();
    await small.release();
  });

  it('a crashed holder\'s permits come back when its lease ends, by the server\'s clock', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 1, locktimeout: 300 });
    await pool.acquire({ _id: 1 }); // never released
    expect((await rejectionOf(pool.acquire({ _id: 1 }))).subtype).to.equal('SemaphoreFull');
    const later = await pool.acquire({ _id: 1 }, { wait: 10_000 });
    expect(later.fence).to.equal(2);
    await later.release();
  });

  it('bad input is refused before anything is written: permits out of range, unknown keys, no limit, a bare count', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 2 });
    const held = await pool.acquire({ _id: 1 });
    const before = await snapshotOf(collection);
    expect(await failureOf(() => pool.acquire({ _id: 1 }, { permits: 3 }))).to.be.instanceOf(RangeError);
    expect(await failureOf(() => pool.acquire({ _id: 1 }, { permits: 0 }))).to.be.instanceOf(RangeError);
    expect(await failureOf(() => pool.acquire({ _id: 1 }, { permits: 1.5 }))).to.be.instanceOf(TypeError);
    expect((await failureOf(() => pool.acquire({ _id: 1 }, { permit: 1 } as never))).message).to.match(/permit.*permits/);
    expect((await failureOf(() => pool.release({ _id: 1 }, { permits: 1 } as never))).message).to.match(/name the holder/);
    expect((await failureOf(() => pool.release({ _id: 1 }, {} as never))).message).to.match(/params\.lock/);
    expect(await snapshotOf(collection), 'nothing written').to.equal(before);
    expect(() => semaphore({ collection } as never)).to.throw(TypeError, /options\.limit/);
    expect(() => semaphore({ collection, limit: 0 })).to.throw(RangeError);
    expect(() => semaphore({ collection, limit: 2.5 })).to.throw(TypeError);
    expect(() => semaphore({ collection, limit: 2, limits: { permit: 2 } } as never)).to.throw(TypeError, /one limit/);
    await held.release();
  });

  it('the limit is the document\'s: another limit is refused (LimitMismatch) while permits are held, and takes over once none is', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const three = semaphore({ collection, limit: 3, locktimeout: 60_000 });
    const two = semaphore({ collection, limit: 2, locktimeout: 60_000 });
    const held = await three.acquire({ _id: 1 });
    const mismatch = await rejectionOf(two.acquire({ _id: 1 }, { wait: 5_000 }));
    expect(mismatch.subtype, 'not waited for: a deployment error').to.equal('LimitMismatch');
    expect(mismatch.message).to.match(/limit 3, this lock's is 2/);
    expect((await three.inspect({ _id: 1 })).permits).to.deep.equal({ permit: { used: 1, limit: 3 } });
    await held.release();
    const now = await two.acquire({ _id: 1 });
    expect((await rejectionOf(three.acquire({ _id: 1 }))).subtype).to.equal('LimitMismatch');
    const seen = await two.inspect({ _id: 1 });
    expect(seen.permits).to.deep.equal({ permit: { used: 1, limit: 2 } });
    expect(seen.locks.map((lock) => [lock.id, lock.permits])).to.deep.equal([[now.id, 1]]);
    await now.release();
  });

  it('many clients, many holders at once: never more than `limit` permits held, by what each holder saw inside', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const limit = 3;
    const clients = await Promise.all(Array.from({ length: 4 }, () => newClient()));
    let inside = 0;
    let most = 0;
    const storedCounts: number[] = [];
    await Promise.all(
      clients.flatMap((client) => {
        const pool = semaphore({ collection: client.db(collection.dbName).collection(collection.collectionName), limit, locktimeout: 30_000 });
        return Array.from({ length: 6 }, async (_, worker) => {
          for (let round = 0; round < 3; round++) {
            const permits = ((worker + round) % 2) + 1;
            await pool.using({ _id: 'hot' }, { wait: 50_000, permits }, async () => {
              inside += permits;
              most = Math.max(most, inside);
              const live = (await collection.findOne({ _id: 'hot' as never }))!.lock.tags.permit as Array<{ exp: Date; permits: number }>;
              storedCounts.push(live.filter((entry) => entry.exp.getTime() > Date.now()).reduce((sum, entry) => sum + entry.permits, 0));
              await sleep(5);
              inside -= permits;
            });
          }
        });
      }),
    );
    expect(storedCounts).to.have.length(72);
    expect(Math.max(...storedCounts), 'live permits stored while inside').to.be.at.most(limit);
    expect(most, 'permits held at once').to.be.within(2, limit);
  });

  it('one process\'s waiters hold permits together: they do not queue behind each other as for an exclusive lock', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const pool = semaphore({ collection, limit: 3, locktimeout: 30_000 });
    let inside = 0;
    let most = 0;
    const atOnce: number[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let round = 0; round < 8; round++) {
          const held = await pool.acquire({ _id: 'hot' }, { wait: 25_000 });
          atOnce.push(++inside);
          most = Math.max(most, inside);
          await sleep(2);
          inside--;
          await held.release();
        }
      }),
    );
    expect(most, 'holders at once in one process').to.be.at.most(3);
    expect(atOnce.filter((n) => n > 1).length, 'sections that began beside another').to.be.greaterThan(atOnce.length / 4);
  });

  it('fair: a large request is not overtaken by a stream of small ones (other processes\' locks: no shared local queue)', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const [a, b, c] = [0, 1, 2].map(() => semaphore({ collection, limit: 2, locktimeout: 60_000, fair: true }));
    const held = await a!.acquire({ _id: 1 });
    const order: string[] = [];
    const big = b!.acquire({ _id: 1 }, { permits: 2, wait: 20_000 }).then((h: LockHandle) => (order.push('big'), h));
    while ((await a!.inspect({ _id: 1 })).waiting.length === 0) await sleep(10);
    const small = await rejectionOf(c!.acquire({ _id: 1 }));
    expect(small.message, 'one permit is free, but the large request came first').to.match(/came first/);
    const smallWaiting = c!.acquire({ _id: 1 }, { wait: 20_000 }).then((h: LockHandle) => (order.push('small'), h));
    await sleep(100);
    await held.release();
    const bigHandle = await big;
    await sleep(50);
    expect(order).to.deep.equal(['big']);
    await bigHandle.release();
    await (await smallWaiting).release();
    expect(order).to.deep.equal(['big', 'small']);
  });

  it('a local release of n permits wakes the first n waiters it may have blocked, not all', () => {
    const waiters = new LocalWaiters(() => Date.now());
    const blocked = new Set(['permit']);
    const joined = [0, 1, 2].map((rank) => waiters.join('doc', 'permit', blocked, () => [rank, '']));
    let woken = 0;
    for (const waiter of joined) void waiter.sleep(60_000).then(() => woken++);
    waiters.released('doc', 'permit', 'some-lock', 2);
    return sleep(10).then(() => {
      expect(woken).to.equal(2);
      expect(joined.map((waiter) => waiter.takeWakeUp())).to.deep.equal([true, true, false]);
      joined[2]!.wake(); // ends its sleep: no timer is left
      for (const waiter of joined) waiter.leave(true);
    });
  });
});

describe('multiLock limits: semaphores that compose with relationships', () => {
  const options = (collection: Parameters<typeof multiLock>[0]['collection']) => ({
    collection,
    locktimeouts: { editor: 60_000, publisher: 60_000 },
    lockRelationships: { editor: { cooperative: ['publisher'] }, publisher: { cooperative: ['editor', 'publisher'] } },
    limits: { editor: 3 },
  });

  it('at most 3 editors, and no editor while the publisher holds it (nor a publisher while editors do)', async () => {
    const collection = await freshCollection([{ _id: 'page' }]);
    const page = multiLock(options(collection));
    const editors = await Promise.all([1, 2, 3].map(() => page.acquire({ _id: 'page' }, { tag: 'editor' })));
    const fourth = await rejectionOf(page.acquire({ _id: 'page' }, { tag: 'editor' }));
    expect(fourth.subtype).to.equal('CooperativeLock');
    expect(fourth.message).to.match(/3 of 3 permits of tag editor/);
    expect((await rejectionOf(page.acquire({ _id: 'page' }, { tag: 'publisher' }))).message).to.match(/held by tag editor/);
    await Promise.all(editors.map((editor) => editor.release()));
    const publisher = await page.acquire({ _id: 'page' }, { tag: 'publisher' });
    expect((await rejectionOf(page.acquire({ _id: 'page' }, { tag: 'editor' }))).message).to.match(/held by tag publisher/);
    await publisher.release();
    const two = await page.acquire({ _id: 'page' }, { tag: 'editor', permits: 2 });
    expect(two.permits).to.equal(2);
    expect((await page.inspect({ _id: 'page' })).permits).to.deep.equal({ editor: { used: 2, limit: 3 } });
    await two.release();
  });

  it('a limit on a tag without one, or an exclusive one, or undeclared, is refused; permits only for a limited tag', async () => {
    const collection = await freshCollection([{ _id: 'page' }]);
    expect(() => multiLock({ ...options(collection), limits: { editr: 3 } as never })).to.throw(TypeError, /editr.*did you mean `editor`/);
    expect(() => multiLock({ ...options(collection), limits: { publisher: 3 } })).to.throw(TypeError, /cooperative with itself/);
    expect(() => multiLock({ ...options(collection), limits: { editor: 10_001 } })).to.throw(RangeError);
    const page = multiLock(options(collection));
    const error = await failureOf(() => page.acquire({ _id: 'page' }, { tag: 'publisher', permits: 1 }));
    expect(error).to.be.instanceOf(TypeError);
    expect(error.message).to.match(/tag `publisher` has no limit/);
    expect(isLockError(error)).to.equal(false);
  });
});
