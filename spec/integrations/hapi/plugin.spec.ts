import { execFileSync } from 'node:child_process';
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { multiLock, semaphore, writeLock, type LockData } from '../../../lib';
import { lockOf, lockPayload } from '../../../lib/hapi';
import { freshCollection, sleep } from '../../support/fixture';
import { heldIds, makeServer, released, send, stopServers } from '../../support/hapi-server';
import { gate } from '../../support/lock-commands';

describe('hapi plugin', () => {
  afterEach(stopServers);

  it('locks before the handler, gives it the lock and its guard, and releases after the response', async () => {
    const collection = await freshCollection([{ _id: 'a', status: 'open' }]);
    const orders = writeLock({ collection });
    let seen: string[] = [];
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/orders/{id}/pay',
        options: {
          plugins: { monglock: { lock: orders, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: async (request) => {
            const { lock, guard } = lockOf(request);
            seen = await heldIds(collection, request.params.id);
            const paid = await collection.updateOne(guard({ status: 'open' }), { $set: { status: 'paid', fence: lock.fence } });
            return { modified: paid.modifiedCount, fence: lock.fence };
          },
        },
      }),
    );
    const response = await server.inject({ method: 'POST', url: '/orders/a/pay' });
    expect(response.statusCode).to.equal(200);
    expect(response.result).to.deep.equal({ modified: 1, fence: 1 });
    expect(seen).to.have.length(1);
    await sleep(20);
    expect(await heldIds(collection, 'a')).to.deep.equal([]);
  });

  it('a semaphore route: at most `limit` requests inside at once, each with its own permit; the next waits or is answered 409', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'acct' }]);
    const exports = semaphore({ collection, limit: 2, locktimeout: 10_000 });
    let inside = 0;
    let most = 0;
    const held = gate();
    const server = await makeServer((s) => {
      for (const [path, wait] of [['/wait', 10_000], ['/now', undefined]] as const) {
        s.route({
          method: 'POST',
          path: `/exports/{id}${path}`,
          options: {
            plugins: { monglock: { lock: exports, filter: (request: Hapi.Request) => ({ _id: request.params.id }), ...(wait ? { wait } : {}) } },
            handler: async (request) => {
              most = Math.max(most, ++inside);
              await held.promise; // the first two stay inside until the refused request was answered
              await sleep(20);
              inside--;
              return { permits: lockOf(request).lock.permits };
            },
          },
        });
      }
    });
    await server.start();
    const port = server.info.port as number;
    const waited = Promise.all([1, 2, 3, 4].map(() => send(port, 'POST', '/exports/acct/wait')));
    for (let i = 0; i < 250 && (await heldIds(collection, 'acct', 'permit')).length < 2; i++) await sleep(20);
    expect(await send(port, 'POST', '/exports/acct/now'), 'both permits are held').to.equal(409);
    held.open();
    expect(await waited).to.deep.equal([200, 200, 200, 200]);
    expect(most).to.equal(2);
    // Released once each response went out (the plugin releases after it).
    for (let i = 0; i < 100 && (await heldIds(collection, 'acct', 'permit')).length > 0; i++) await sleep(20);
    expect(await heldIds(collection, 'acct', 'permit'), 'every permit released').to.deep.equal([]);
  });

  it('answers every lock outcome with the matching boom response', async () => {
    const collection = await freshCollection([{ _id: 'held' }, { _id: 'broken', lock: 'x' }, { _id: 'free' }]);
    const orders = writeLock({ collection });
    await orders.acquire({ _id: 'held' });
    const rw = multiLock({
      collection,
      locktimeouts: { read: 5_000, write: 5_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/w/{id}',
        options: { plugins: { monglock: { lock: orders, filter: (r: Hapi.Request) => ({ _id: r.params.id }) } }, handler: () => 'ok' },
      });
      for (const tag of ['read', 'write']) {
        s.route({
          method: 'POST',
          path: `/${tag}/{id}`,
          options: { plugins: { monglock: { lock: rw, tag, filter: (r: Hapi.Request) => ({ _id: r.params.id }) } }, handler: () => 'ok' },
        });
      }
    });
    const answer = async (url: string): Promise<string> => {
      const response = await server.inject({ method: 'POST', url });
      const payload = response.result as { message?: string } | string;
      return `${response.statusCode} ${typeof payload === 'string' ? payload : payload.message}`;
    };
    expect(await answer('/w/free')).to.equal('200 ok');
    await released(collection, 'free'); // released once the response is out: before `rw` reads the same lock field
    expect(await answer('/w/missing')).to.equal('404 RessourceNotFound');
    expect(await answer('/w/held')).to.equal('409 LockAlreadyTaken');
    expect(await answer('/w/broken')).to.equal('500 An internal server error occurred');
    const reader = await rw.acquire({ _id: 'free' }, { tag: 'read' });
    expect(await answer('/write/free')).to.equal('409 AssertiveLock');
    expect(await answer('/read/free'), 'the refused assertive registration was released').to.equal('200 ok');
    const writer = await rw.acquire({ _id: 'free' }, { lock: (await rw.acquire({ _id: 'free' }, { tag: 'write' }).catch((e) => e.lock)) as LockData }).catch((e) => e);
    expect(writer.subtype).to.equal('AssertiveLock');
    await reader.release();
    await released(collection, 'free', 2_000, 'read'); // the route's read lock goes once its response is out, maybe later than this
    await rw.release({ _id: 'free' }, { lock: writer.lock });
    await rw.acquire({ _id: 'free' }, { tag: 'write' });
    expect(await answer('/read/free')).to.equal('409 CooperativeLock');
  });

  it('an assertive route waits inside the request up to `wait`', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const rw = multiLock({
      collection,
      locktimeouts: { read: 5_000, write: 5_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/write/{id}',
        options: { plugins: { monglock: { lock: rw, tag: 'write', wait: 3_000, filter: (r: Hapi.Request) => ({ _id: Number(r.params.id) }) } }, handler: () => 'written' },
      }),
    );
    const reader = await rw.acquire({ _id: 1 }, { tag: 'read' });
    setTimeout(() => void reader.release(), 200);
    const started = Date.now();
    const response = await server.inject({ method: 'POST', url: '/write/1' });
    expect(response.statusCode).to.equal(200);
    expect(Date.now() - started).to.be.at.least(180);
  });

  it('after hapi\'s server timeout answers 503, keeps the lock until the handler finishes', async () => {
    const collection = await freshCollection([{ _id: 's' }]);
    const lock = writeLock({ collection });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/slow',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock, filter: () => ({ _id: 's' }) } },
          handler: async () => {
            await sleep(300);
            return 'too late';
          },
        },
      }),
    );
    expect((await server.inject({ method: 'POST', url: '/slow' })).statusCode).to.equal(503);
    expect(await heldIds(collection, 's'), 'the handler still runs').to.have.length(1);
    await sleep(350);
    expect(await heldIds(collection, 's')).to.deep.equal([]);
  });

  it('releases when the handler throws, and when the client disconnects (after the handler finished)', async () => {
    const collection = await freshCollection([{ _id: 't' }, { _id: 'd' }]);
    const lock = writeLock({ collection });
    let handlerDone = false;
    let heldWhenHandlerEnded: string[] = [];
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/throw/{id}',
        options: {
          plugins: { monglock: { lock, filter: (r: Hapi.Request) => ({ _id: r.params.id }) } },
          handler: () => {
            throw Boom.teapot('nope');
          },
        },
      });
      s.route({
        method: 'GET',
        path: '/slow/{id}',
        options: {
          plugins: { monglock: { lock, filter: (r: Hapi.Request) => ({ _id: r.params.id }) } },
          handler: async (request) => {
            await sleep(300);
            heldWhenHandlerEnded = await heldIds(collection, request.params.id);
            handlerDone = true;
            return 'late';
          },
        },
      });
    });
    expect((await server.inject({ method: 'POST', url: '/throw/t' })).statusCode).to.equal(418);
    await sleep(20);
    expect(await heldIds(collection, 't')).to.deep.equal([]);

    await server.start();
    const answered = new Promise<number>((resolve) => server.events.once('response', (request) => resolve((request.response as unknown as Boom.Boom).output.statusCode)));
    expect(await send(server.info.port as number, 'GET', '/slow/d', 100)).to.equal(0);
    expect(await answered, 'hapi answered the disconnect while the handler runs').to.equal(499);
    await sleep(100);
    expect(handlerDone).to.equal(false);
    expect(await heldIds(collection, 'd'), 'still held while the handler runs').to.have.length(1);
    await sleep(400);
    expect(handlerDone).to.equal(true);
    expect(heldWhenHandlerEnded).to.have.length(1);
    expect(await heldIds(collection, 'd')).to.deep.equal([]);
  });

  it('real HTTP, 40 concurrent clients on one document: one handler at a time, the others 409 (or all 200 with wait)', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const lock = writeLock({ collection });
    let inside = 0;
    let most = 0;
    const server = await makeServer((s) => {
      for (const [path, wait] of [['/fast', 0], ['/wait', 20_000]] as const) {
        s.route({
          method: 'POST',
          path,
          options: {
            plugins: { monglock: { lock, wait, filter: () => ({ _id: 'hot' }) } },
            handler: async () => {
              inside++;
              most = Math.max(most, inside);
              await sleep(15);
              inside--;
              return 'done';
            },
          },
        });
      }
    });
    await server.start();
    const port = server.info.port as number;
    const fast = await Promise.all(Array.from({ length: 40 }, () => send(port, 'POST', '/fast')));
    expect(fast.filter((code) => code === 200).length).to.be.at.least(1);
    expect(fast.filter((code) => code !== 200 && code !== 409)).to.deep.equal([]);
    const waited = await Promise.all(Array.from({ length: 40 }, () => send(port, 'POST', '/wait')));
    expect(waited.every((code) => code === 200)).to.equal(true);
    expect(most).to.equal(1);
  });

  it('checkout/checkin: acquire in one request, release or extend with the returned JSON in later ones', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lock = writeLock({ collection, locktimeout: 5_000, boom: Boom });
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/docs/{id}/checkout',
        options: { plugins: { monglock: { lock, mode: 'checkout', filter: (r: Hapi.Request) => ({ _id: r.params.id }) } }, handler: (r) => lockOf(r).lock },
      });
      s.route({
        method: 'POST',
        path: '/docs/{id}/extend',
        handler: (r) => lock.extend({ _id: r.params.id }, { lock: (r.payload as { lock: LockData }).lock, locktimeout: 10_000 }),
      });
      s.route({
        method: 'POST',
        path: '/docs/{id}/checkin',
        handler: async (r) => {
          await lock.release({ _id: r.params.id }, { lock: (r.payload as { lock: LockData }).lock });
          return 'released';
        },
      });
    });
    const checkout = await server.inject({ method: 'POST', url: '/docs/doc/checkout' });
    expect(checkout.statusCode).to.equal(200);
    const handle = JSON.parse(checkout.payload) as LockData;
    expect(await heldIds(collection, 'doc')).to.deep.equal([handle.id]);
    expect((await server.inject({ method: 'POST', url: '/docs/doc/checkout' })).statusCode).to.equal(409);
    const extended = await server.inject({ method: 'POST', url: '/docs/doc/extend', payload: { lock: handle } });
    expect(JSON.parse(extended.payload).expiresAt).to.be.greaterThan(handle.expiresAt);
    expect((await server.inject({ method: 'POST', url: '/docs/doc/checkin', payload: { lock: handle } })).result).to.equal('released');
    expect((await server.inject({ method: 'POST', url: '/docs/doc/checkin', payload: { lock: handle } })).statusCode).to.equal(409);
  });

  it('checkin and extend routes validated by lockPayload answer 400 to a payload without the checkout\'s JSON, and the checkout stays held', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lock = writeLock({ collection, locktimeout: 5_000, boom: Boom });
    const other = multiLock({ collection, locktimeouts: { read: 5_000 } });
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/docs/{id}/checkout',
        options: { plugins: { monglock: { lock, mode: 'checkout', filter: (r: Hapi.Request) => ({ _id: r.params.id }) } }, handler: (r) => lockOf(r).lock },
      });
      for (const action of ['extend', 'checkin'] as const) {
        s.route({
          method: 'POST',
          path: `/docs/{id}/${action}`,
          options: {
            validate: { payload: lockPayload(lock) },
            handler: async (r) => {
              const params = { lock: (r.payload as { lock: LockData }).lock };
              return action === 'extend' ? lock.extend({ _id: r.params.id }, params) : (await lock.release({ _id: r.params.id }, params), 'released');
            },
          },
        });
      }
    });
    const handle = JSON.parse((await server.inject({ method: 'POST', url: '/docs/doc/checkout' })).payload) as LockData;
    const forged: Array<string | object | undefined> = [undefined, {}, { lock: null }, { lock: handle.timestamp }, { lock: { ...handle, id: 7 } }, { lock: { ...handle, tag: 'read' } }, 'lock'];
    for (const action of ['extend', 'checkin']) {
      for (const payload of forged) {
        const response = await server.inject({ method: 'POST', url: `/docs/doc/${action}`, ...(payload !== undefined && { payload }) });
        expect(response.statusCode, `${action} with ${JSON.stringify(payload)}`).to.equal(400);
      }
      const guessed = await server.inject({ method: 'POST', url: `/docs/doc/${action}`, payload: { lock: { ...handle, id: 'f'.repeat(32) } } });
      expect(guessed.statusCode, `${action} with a well-formed id of no lock`).to.equal(409);
    }
    const stored = (await collection.findOne({ _id: 'doc' as never }))?.lock.tags.write as Array<{ id: string; exp: Date }>;
    expect(stored.map((entry) => entry.id), 'the checkout is still held').to.deep.equal([handle.id]);
    expect(stored[0]?.exp.getTime(), 'and was not extended').to.equal(handle.expiresAt);
    expect((await server.inject({ method: 'POST', url: '/docs/doc/checkin', payload: { lock: handle, note: 'kept' } })).result).to.equal('released');
    expect(() => lockPayload({ acquire: () => undefined }), 'a lock this package did not make').to.throw(TypeError, /lockPayload/);
    expect((await lockPayload(other)({ lock: { ...handle, tag: 'read' } })).lock.tag, 'a multiLock checks its own tags').to.equal('read');
  });

  it('a misconfigured route fails server.initialize(), not its first request', async () => {
    const server = await makeServer((s) =>
      s.route({ method: 'GET', path: '/x', options: { plugins: { monglock: { lock: {} as never, filter: 'id' as never } }, handler: () => 'x' } }),
    );
    let failure: unknown;
    await server.initialize().catch((error: unknown) => (failure = error));
    expect(String(failure)).to.match(/plugins.monglock.filter/);
  });

  it('the core entry never loads hapi or boom', () => {
    const loaded = execFileSync(process.execPath, ['--require', 'tsx/cjs', '-e', "require('./lib'); console.log(Object.keys(require.cache).filter((k) => k.includes('@hapi')).length)"], {
      encoding: 'utf8',
    });
    expect(loaded.trim()).to.equal('0');
  });
});
