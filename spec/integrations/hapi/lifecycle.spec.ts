/**
 * Defect 1: the lock must cover every step from onPreHandler to the end of the handler, pre
 * methods included, also when hapi answers early (server timeout, client disconnect) while the
 * handler step goes on.
 */
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { commandsSentBy, freshCollection, sleep } from '../../support/fixture';
import { whatAnAcquisitionGets } from '../../support/lock-commands';
import { heldIds, makeServer, released, responseOf, send, stopServers } from '../../support/hapi-server';

/** A promise with its resolve function. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => (resolve = done));
  return { promise, resolve };
}


const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

describe('hapi plugin: the lock covers pre methods and the handler', () => {
  afterEach(stopServers);

  it('server timeout during a slow pre: the pre and then the handler run under the lock, a rival is refused until the handler finished', async () => {
    const collection = await freshCollection([{ _id: 'p', writes: 0 }]);
    const lock = writeLock({ collection });
    await (await lock.acquire({ _id: 'p' })).release(); // the server's clock is known: the route's acquisition is one command
    const rival = writeLock({ collection });
    const seen: Record<string, string | number> = {};
    const handlerDone = deferred();
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/orders/{id}',
        options: {
          timeout: { server: 500 }, // the lock is taken well within it on a loaded machine (with two CPU hogs beside it, not within 100 ms)
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            {
              assign: 'checked',
              method: async (request: Hapi.Request) => {
                await answered; // the 503 is out; the pre goes on
                await sleep(50);
                seen.rivalDuringPre = await whatAnAcquisitionGets(rival, { _id: request.params.id });
                await sleep(150);
                return 'checked';
              },
            },
          ],
          handler: async (request) => {
            const write = await collection.updateOne(lockOf(request).guard(), { $inc: { writes: 1 } });
            seen.matched = write.matchedCount;
            seen.rivalDuringHandler = await whatAnAcquisitionGets(rival, { _id: request.params.id });
            handlerDone.resolve();
            return 'done';
          },
        },
      }),
    );
    const answered = responseOf(server, '/orders/p');
    expect((await server.inject({ method: 'POST', url: '/orders/p' })).statusCode).to.equal(503);
    expect(await answered).to.equal(503);
    await handlerDone.promise;
    expect(seen).to.deep.equal({ rivalDuringPre: 'LockAlreadyTaken', matched: 1, rivalDuringHandler: 'LockAlreadyTaken' });
    await released(collection, 'p');
    expect(await whatAnAcquisitionGets(rival, { _id: 'p' })).to.equal('acquired');
    expect((await collection.findOne({ _id: 'p' as never }))?.writes).to.equal(1);
  });

  it('client disconnect during a slow pre: a second request and a rival are refused, the handler writes under the lock, then it is released', async () => {
    const collection = await freshCollection([{ _id: 'd', writes: 0 }]);
    const lock = writeLock({ collection });
    const rival = writeLock({ collection });
    const seen: Record<string, string | number> = {};
    const handlerDone = deferred();
    let port = 0;
    const server = await makeServer((s) => {
      s.route({
        method: 'GET',
        path: '/orders/{id}',
        options: {
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            async (request: Hapi.Request) => {
              await answered; // the client is gone and hapi has finished the request
              await sleep(50);
              seen.secondRequest = await send(port, 'POST', `/orders/${request.params.id}/quick`);
              seen.rivalDuringPre = await whatAnAcquisitionGets(rival, { _id: request.params.id });
              await sleep(150);
              return 'checked';
            },
          ],
          handler: async (request) => {
            seen.matched = (await collection.updateOne(lockOf(request).guard(), { $inc: { writes: 1 } })).matchedCount;
            seen.rivalDuringHandler = await whatAnAcquisitionGets(rival, { _id: request.params.id });
            handlerDone.resolve();
            return 'done';
          },
        },
      });
      s.route({ method: 'POST', path: '/orders/{id}/quick', options: { plugins: { monglock: { lock, filter: byId } }, handler: () => 'quick' } });
    });
    await server.start();
    port = server.info.port as number;
    const answered = responseOf(server, '/orders/d');
    expect(await send(port, 'GET', '/orders/d', 100)).to.equal(0);
    expect(await answered, 'hapi answered the disconnect (499) while the pre ran').to.equal(499);
    await handlerDone.promise;
    expect(seen).to.deep.equal({ secondRequest: 409, rivalDuringPre: 'LockAlreadyTaken', matched: 1, rivalDuringHandler: 'LockAlreadyTaken' });
    await released(collection, 'd');
    expect(await send(port, 'POST', '/orders/d/quick')).to.equal(200);
  });

  it('a pre that throws or takes over after a server timeout still leads to the release, and the handler never runs', async () => {
    const collection = await freshCollection([{ _id: 'throw' }, { _id: 'takeover' }]);
    const lock = writeLock({ collection });
    const rival = writeLock({ collection });
    const seen: Record<string, string> = {};
    const presDone = { throw: deferred(), takeover: deferred() };
    let handlerRuns = 0;
    const server = await makeServer((s) => {
      for (const id of ['throw', 'takeover'] as const) {
        s.route({
          method: 'POST',
          path: `/${id}/{id}`,
          options: {
            timeout: { server: 100 },
            plugins: { monglock: { lock, filter: byId } },
            pre: [
              async (request: Hapi.Request, h: Hapi.ResponseToolkit) => {
                await responses[id];
                await sleep(50);
                seen[id] = await whatAnAcquisitionGets(rival, { _id: request.params.id });
                await sleep(50);
                presDone[id].resolve();
                if (id === 'throw') throw new Error('the pre failed');
                return h.response('taken over').takeover();
              },
            ],
            handler: () => {
              handlerRuns++;
              return 'handler';
            },
          },
        });
      }
    });
    const responses: Record<string, Promise<number>> = { throw: responseOf(server, '/throw/throw'), takeover: responseOf(server, '/takeover/takeover') };
    const answers = await Promise.all(['throw', 'takeover'].map((id) => server.inject({ method: 'POST', url: `/${id}/${id}` })));
    expect(answers.map((answer) => answer.statusCode)).to.deep.equal([503, 503]);
    await Promise.all([presDone.throw.promise, presDone.takeover.promise]);
    await Promise.all([released(collection, 'throw'), released(collection, 'takeover')]);
    expect(seen).to.deep.equal({ throw: 'LockAlreadyTaken', takeover: 'LockAlreadyTaken' });
    expect(handlerRuns).to.equal(0);
  });

  it('parallel pre methods and a later pre set after a server timeout: every one runs under the lock', async () => {
    const collection = await freshCollection([{ _id: 'par', writes: 0 }]);
    const lock = writeLock({ collection });
    const rival = writeLock({ collection });
    const seen: Record<string, string | number> = {};
    const handlerDone = deferred();
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/par/{id}',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            [
              { assign: 'fast', method: () => 'fast' },
              {
                assign: 'slow',
                method: async (request: Hapi.Request) => {
                  await answered;
                  await sleep(50);
                  seen.slow = await whatAnAcquisitionGets(rival, { _id: request.params.id });
                  await sleep(100);
                  return 'slow';
                },
              },
            ],
            {
              assign: 'later',
              method: async (request: Hapi.Request) => {
                seen.later = await whatAnAcquisitionGets(rival, { _id: request.params.id });
                return 'later';
              },
            },
          ],
          handler: async (request) => {
            seen.pre = Object.values(request.pre).join(',');
            seen.matched = (await collection.updateOne(lockOf(request).guard(), { $inc: { writes: 1 } })).matchedCount;
            handlerDone.resolve();
            return 'done';
          },
        },
      }),
    );
    const answered = responseOf(server, '/par/par');
    expect((await server.inject({ method: 'POST', url: '/par/par' })).statusCode).to.equal(503);
    await handlerDone.promise;
    expect(seen).to.deep.equal({ slow: 'LockAlreadyTaken', later: 'LockAlreadyTaken', pre: 'fast,slow,later', matched: 1 });
    await released(collection, 'par');
  });

  it("a pre's failAction function after a server timeout runs under the lock, and so does the handler after it", async () => {
    const collection = await freshCollection([{ _id: 'fa', writes: 0 }]);
    const lock = writeLock({ collection });
    await (await lock.acquire({ _id: 'fa' })).release(); // the server's clock is known: the route's acquisition is one command
    const rival = writeLock({ collection });
    const seen: Record<string, string | number> = {};
    const handlerDone = deferred();
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/fa/{id}',
        options: {
          timeout: { server: 500 }, // the lock is taken well within it on a loaded machine (in CI, once not within 100 ms: the test hung)
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            {
              assign: 'price',
              method: async () => {
                await answered;
                throw Boom.badGateway('pricing service down');
              },
              failAction: async (request: Hapi.Request) => {
                await sleep(50);
                seen.failAction = await whatAnAcquisitionGets(rival, { _id: request.params.id });
                await sleep(50);
                return 'default price';
              },
            },
          ],
          handler: async (request) => {
            seen.price = String(request.pre.price);
            seen.matched = (await collection.updateOne(lockOf(request).guard(), { $inc: { writes: 1 } })).matchedCount;
            handlerDone.resolve();
            return 'done';
          },
        },
      }),
    );
    const answered = responseOf(server, '/fa/fa');
    expect((await server.inject({ method: 'POST', url: '/fa/fa' })).statusCode).to.equal(503);
    await handlerDone.promise;
    expect(seen).to.deep.equal({ failAction: 'LockAlreadyTaken', price: 'default price', matched: 1 });
    await released(collection, 'fa');
  });

  it('a client that disconnects while its request waits for the lock stops the wait: no lock is taken, and the handler never runs', async () => {
    const collection = await freshCollection([{ _id: 'w' }]);
    const lock = writeLock({ collection });
    const holder = await writeLock({ collection }).acquire({ _id: 'w' });
    let handlerRuns = 0;
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/wait/{id}',
        options: {
          plugins: { monglock: { lock, filter: byId, wait: 5_000 } },
          handler: () => {
            handlerRuns++;
            return 'done';
          },
        },
      }),
    );
    await server.start();
    const answered = responseOf(server, '/wait/w');
    expect(await send(server.info.port as number, 'GET', '/wait/w', 100)).to.equal(0);
    expect(await answered).to.equal(499);
    // The wait was aborted with the response: no attempt starts any more. (One already in flight
    // may still land after the holder's release on a loaded machine, seen once beside a busy loop:
    // the lock it wrote is then released at once.)
    const after = await commandsSentBy(async () => {
      await holder.release();
      await sleep(400);
    });
    expect(after.commands.filter((name) => name === 'findAndModify'), 'no acquisition attempt after the response').to.deep.equal([]);
    await released(collection, 'w');
    expect(handlerRuns).to.equal(0);
  });

  it('once the lock is released, a pre method or handler that hapi still calls is refused and never runs', async () => {
    const collection = await freshCollection([{ _id: 'late' }]);
    const lock = writeLock({ collection });
    const calls: string[] = [];
    const handlerRan = deferred<string>();
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/late/{id}',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            // Its response's async prepare keeps hapi busy for more than a macrotask after the pre returned.
            {
              assign: 'price',
              method: async (request: Hapi.Request) => {
                await answered;
                return request.generateResponse('42', { variety: 'plain', prepare: async (response) => (await sleep(100), response) });
              },
            },
            { assign: 'second', method: () => (calls.push('second pre'), 'second'), failAction: 'ignore' },
          ],
          handler: () => (calls.push('handler'), handlerRan.resolve('the handler ran'), 'handler'),
        },
      }),
    );
    const refused = new Promise<string>((resolve) =>
      server.events.on({ name: 'request', channels: 'internal' }, (_request, event, tags) => {
        const error = (event.error ?? event.data) as Error | undefined;
        if (tags.handler && error?.message?.includes('monglock')) resolve(error.message);
      }),
    );
    const answered = responseOf(server, '/late/late');
    expect((await server.inject({ method: 'POST', url: '/late/late' })).statusCode).to.equal(503);
    expect(await Promise.race([refused, handlerRan.promise])).to.equal('monglock: not running the handler of POST /late/{id}: its lock is released');
    expect(calls, 'neither the second pre method nor the handler ran').to.deep.equal([]);
    await released(collection, 'late');
  });

  it("when hapi's pre internals cannot be wrapped, the lock is held until the handler has finished (and a warning is logged once)", async () => {
    const collection = await freshCollection([{ _id: 'fb', writes: 0 }]);
    const lock = writeLock({ collection });
    const rival = writeLock({ collection });
    const warnings: string[] = [];
    const seen: Record<string, string | number> = {};
    const server = await makeServer((s) => {
      s.events.on('log', (event, tags) => tags.warning && warnings.push(String(event.data)));
      // Stands for a hapi whose prerequisites the plugin does not recognise.
      s.ext('onPreAuth', (request, h) => {
        for (const set of (request as unknown as { _route: { _prerequisites: object[][] | null } })._route._prerequisites ?? []) set.forEach((item) => Object.freeze(item));
        return h.continue;
      });
      s.route({
        method: 'POST',
        path: '/fb/{id}',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock, filter: byId } },
          pre: [
            async (request: Hapi.Request) => {
              await sleep(150);
              seen.rivalDuringPre = await whatAnAcquisitionGets(rival, { _id: request.params.id });
              await sleep(50);
              return 'checked';
            },
          ],
          handler: async (request) => {
            seen.matched = (await collection.updateOne(lockOf(request).guard(), { $inc: { writes: 1 } })).matchedCount;
            return 'done';
          },
        },
      });
    });
    const handled = responseOf(server, '/fb/fb');
    expect((await server.inject({ method: 'POST', url: '/fb/fb' })).statusCode).to.equal(503);
    await handled;
    await released(collection, 'fb');
    expect(seen).to.deep.equal({ rivalDuringPre: 'LockAlreadyTaken', matched: 1 });
    expect((await server.inject({ method: 'POST', url: '/fb/fb' })).statusCode).to.equal(503);
    await released(collection, 'fb');
    expect(warnings).to.deep.equal([
      'monglock: cannot follow the pre methods of POST /fb/{id} in this hapi version; its lock is released only after the handler has finished (or by its lease)',
    ]);
  });
});

/*
 * A `mode: 'checkout'` route keeps its lock after the response, for the client to release later
 * with the JSON the handler returns; when that JSON never reaches the client (the client
 * disconnected while the request waited for the lock; the handler failed), the plugin releases
 * the lock. The defect guarded against: nobody could release it, and the document stayed locked
 * until the lease ended.
 */
describe('hapi checkout routes whose lock never reaches the client', () => {
  afterEach(stopServers);

  it('the client disconnects while its checkout request waits for the lock: nobody holds the lock afterwards', async () => {
    const collection = await freshCollection([{ _id: 'd' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const holder = await writeLock({ collection }).acquire({ _id: 'd' });
    let handlerRuns = 0;
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/docs/{id}/checkout',
        options: {
          plugins: { monglock: { lock, filter: byId, wait: 5_000, mode: 'checkout' } },
          handler: (request) => {
            handlerRuns++;
            return lockOf(request).lock;
          },
        },
      }),
    );
    await server.start();
    expect(await send(server.info.port as number, 'GET', '/docs/d/checkout', 100)).to.equal(0); // gave up
    await holder.release();
    await sleep(1_000);
    expect({ handlerRuns, held: (await heldIds(collection, 'd')).length }, 'nobody received the lock, so nobody may hold it').to.deep.equal({ handlerRuns: 0, held: 0 });
  });

  it('the checkout handler fails (500): the client never got the lock JSON, so the lock is released', async () => {
    const collection = await freshCollection([{ _id: 'e' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/docs/{id}/checkout',
        options: {
          plugins: { monglock: { lock, filter: byId, mode: 'checkout' } },
          handler: () => {
            throw new Error('the draft could not be loaded');
          },
        },
      }),
    );
    expect((await server.inject({ method: 'POST', url: '/docs/e/checkout' })).statusCode).to.equal(500);
    await sleep(200);
    expect(await heldIds(collection, 'e'), 'a failed checkout holds nothing').to.deep.equal([]);
  });

  it('an answer without the lock JSON (HEAD on a GET checkout route, a 204) releases the lock before it goes out, one with part of it (a 206 of a range) once it went out: the next checkout gets it', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'h' }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const server = await makeServer((s) => {
      s.route({ method: 'GET', path: '/drafts/{id}/checkout', options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout' } }, handler: (request) => lockOf(request).lock } });
      s.route({ method: 'POST', path: '/drafts/{id}/touch', options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout' } }, handler: (_request, h) => h.response().code(204) } });
    });
    await server.start();
    const url = `http://127.0.0.1:${server.info.port}/drafts/h`;
    const head = await fetch(`${url}/checkout`, { method: 'HEAD' });
    expect({ status: head.status, body: await head.text() }, 'HEAD answered without the lock JSON').to.deep.equal({ status: 200, body: '' });
    const ranged = await fetch(`${url}/checkout`, { headers: { range: 'bytes=0-9' } });
    expect({ status: ranged.status, length: (await ranged.text()).length }, 'a range request gets part of the JSON').to.deep.equal({ status: 206, length: 10 });
    await released(collection, 'h'); // released once the 206 went out (hapi cuts the range as it sends)
    const touched = await fetch(`${url}/touch`, { method: 'POST' });
    expect(touched.status, 'a 204 checkout').to.equal(204);
    const next = await fetch(`${url}/checkout`);
    expect(next.status, 'a checkout right after each of them (its lock was released before the answer)').to.equal(200);
    expect(await heldIds(collection, 'h'), 'held by the last checkout only').to.deep.equal([((await next.json()) as { id: string }).id]);
  });
});
