/**
 * Defect 8: a misconfigured route must fail server.initialize()/start(), naming the route and
 * the option, instead of answering 500 to every request.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, writeLock } from '../../../lib';
import { lockOf, monglockPlugin } from '../../../lib/hapi';
import { describeLock } from '../../../lib/locks/lock-kind';
import { freshCollection, rejectionOf, sleep } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const rw = (collection: Collection<Document>) => ({
  collection,
  locktimeouts: { read: 5_000, write: 5_000 },
  lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
});

/** A server with one `POST /orders/{id}` route configured with `monglock`; counts what the route ran. */
async function serverWith(monglock: Record<string, unknown>): Promise<{ server: Hapi.Server; ran: string[] }> {
  const ran: string[] = [];
  const server = await makeServer((s) =>
    s.route({
      method: 'POST',
      path: '/orders/{id}',
      options: {
        // Deliberately unchecked: these routes are misconfigured on purpose.
        plugins: { monglock: { filter: (request: Hapi.Request) => (ran.push('filter'), { _id: request.params.id }), ...monglock } as never },
        handler: () => (ran.push('handler'), 'ok'),
      },
    }),
  );
  return { server, ran };
}

/** The error server.initialize() rejects with; nothing of the route ran. */
async function initializeError(monglock: Record<string, unknown>): Promise<string> {
  const { server, ran } = await serverWith(monglock);
  const error = await rejectionOf(server.initialize());
  expect(ran).to.deep.equal([]);
  return error.message;
}

describe('hapi plugin: route configuration is checked at server.initialize()', () => {
  afterEach(stopServers);

  it('a multiLock route needs a tag, and one its lock declares', async () => {
    const collection = await freshCollection();
    expect(await initializeError({ lock: multiLock(rw(collection)) })).to.equal(
      'Expected `plugins.monglock.tag` of POST /orders/{id} to be one of its multiLock\'s tags (read, write), got `undefined` (undefined)',
    );
    expect(await initializeError({ lock: multiLock(rw(collection)), tag: 'admin' })).to.equal(
      'Expected `plugins.monglock.tag` of POST /orders/{id} to be one of its multiLock\'s tags (read, write), got `admin` (string)',
    );
    expect(await initializeError({ lock: multiLock(rw(collection)), tag: 7 })).to.match(/`plugins\.monglock\.tag` of POST \/orders\/\{id\}.*got `7` \(number\)/);
    const { server } = await serverWith({ lock: multiLock(rw(collection)), tag: 'read' });
    await server.initialize();
  });

  it('a writeLock route takes no tag (or `write`)', async () => {
    const collection = await freshCollection();
    expect(await initializeError({ lock: writeLock({ collection }), tag: 'read' })).to.equal(
      'Expected no `plugins.monglock.tag` of POST /orders/{id}: its lock is a writeLock (tag `write`), got `read` (string)',
    );
    for (const tag of [undefined, 'write']) {
      const { server } = await serverWith({ lock: writeLock({ collection }), tag });
      await server.initialize();
    }
  });

  it('locktimeout must be a positive integer of ms', async () => {
    const collection = await freshCollection();
    for (const locktimeout of [0, -1, 2.5, '5000', 2 ** 31, null]) {
      expect(await initializeError({ lock: writeLock({ collection }), locktimeout }), String(locktimeout)).to.match(
        /^Expected `plugins\.monglock\.locktimeout of POST \/orders\/\{id\}` to be (an integer number of ms|between 1 and 2147483647 ms)/,
      );
    }
    const { server } = await serverWith({ lock: writeLock({ collection }), locktimeout: 1 });
    await server.initialize();
  });

  it('wait: Infinity is accepted, as the library accepts it; a negative wait is not', async () => {
    const collection = await freshCollection([{ _id: 'w' }]);
    expect(await initializeError({ lock: writeLock({ collection }), wait: -1 })).to.match(/^Expected `plugins\.monglock\.wait of POST \/orders\/\{id\}`/);
    const { server } = await serverWith({ lock: writeLock({ collection }), wait: Infinity });
    await server.initialize();
    expect((await server.inject({ method: 'POST', url: '/orders/w' })).statusCode).to.equal(200);
  });

  it('unknown keys are refused, naming the route and the key', async () => {
    const collection = await freshCollection();
    for (const key of ['lockTimeout', 'timeout', 'tags']) {
      expect(await initializeError({ lock: writeLock({ collection }), [key]: 1_000 })).to.equal(
        `Unknown option \`plugins.monglock.${key}\` of POST /orders/{id}: expected lock, filter, filters, tag, wait, locktimeout, mode, document, maxHold`,
      );
    }
  });

  it('lock options instead of a lock instance are refused, naming the route (hapi deep-copies route options, driver Collection included)', async () => {
    const collection = await freshCollection();
    for (const lock of [{ collection }, rw(collection), 'orders']) {
      expect(await initializeError({ lock, tag: 'read' })).to.match(/^Expected `plugins\.monglock\.lock` of POST \/orders\/\{id\} to be a writeLock, multiLock or semaphore instance/);
    }
  });

  it('a lock not made by monglock (with an acquire function) is accepted as before, whatever its tag', async () => {
    const calls: unknown[] = [];
    const collection = await freshCollection([{ _id: 'a' }]);
    const real = writeLock({ collection });
    const foreign = { acquire: (filter: Document, params: { tag?: string }) => (calls.push(params.tag), real.acquire(filter)) };
    const { server, ran } = await serverWith({ lock: foreign, tag: 'anything' });
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/orders/a' });
    expect(response.statusCode).to.equal(200);
    expect(calls).to.deep.equal(['anything']);
    expect(ran).to.deep.equal(['filter', 'handler']);
  });

  it('a route with a lock instance and a wrong tag fails initialize (describeLock sees through hapi\'s copy of route options)', async () => {
    const collection = await freshCollection();
    const instance = multiLock(rw(collection));
    const { server } = await serverWith({ lock: instance });
    // hapi deep-copies route options (Hoek.applyToDefaults): the route holds a copy of the instance, with the same methods.
    const seen = (server.table()[0]?.settings.plugins as { monglock: { lock: unknown } }).monglock.lock;
    expect(seen).to.not.equal(instance);
    expect(describeLock(seen)?.kind).to.equal('multiLock');
    expect((await rejectionOf(server.initialize())).message).to.match(/`plugins\.monglock\.tag` of POST \/orders\/\{id\}/);
    const { server: writeServer } = await serverWith({ lock: writeLock({ collection }), tag: 'read' });
    expect((await rejectionOf(writeServer.initialize())).message).to.match(/Expected no `plugins\.monglock\.tag` of POST \/orders\/\{id\}/);
  });

  it('a correctly configured multiLock instance route serves requests', async () => {
    const collection = await freshCollection([{ _id: 'b' }]);
    const { server } = await serverWith({ lock: multiLock(rw(collection)), tag: 'write', locktimeout: 2_000 });
    server.route({ method: 'POST', path: '/tag/{id}', options: { plugins: { monglock: { lock: multiLock(rw(collection)), tag: 'read', wait: 2_000, filter: () => ({ _id: 'b' }) } }, handler: (r) => lockOf(r).lock.tag } });
    await server.initialize();
    expect((await server.inject({ method: 'POST', url: '/orders/b' })).statusCode).to.equal(200);
    expect((await server.inject({ method: 'POST', url: '/tag/b' })).result).to.equal('read');
  });

  it('minHold is not offered on routes: refused, saying why (a sequential client would be refused by its own previous request)', async () => {
    const collection = await freshCollection();
    expect(await initializeError({ lock: writeLock({ collection }), minHold: 1_000 })).to.match(/^Unexpected option `plugins\.monglock\.minHold` of POST \/orders\/\{id\}: a minimum hold is not offered on routes/);
  });

  it('a route added after server.initialize() is checked when added: a misconfigured one makes server.route() throw, naming it', async () => {
    const collection = await freshCollection([{ _id: 'c' }]);
    const { server } = await serverWith({ lock: writeLock({ collection }) });
    await server.initialize();
    const late = (monglock: Record<string, unknown>, path: string) => () =>
      server.route({ method: 'POST', path, options: { plugins: { monglock: { filter: (request: Hapi.Request) => ({ _id: request.params.id }), ...monglock } as never }, handler: () => 'late' } });
    expect(late({ lock: writeLock({ collection }), locktimeout: -1 }, '/late/{id}'), 'a bad locktimeout').to.throw(RangeError, /plugins\.monglock\.locktimeout of POST \/late\/\{id\}/);
    expect(late({ lock: writeLock({ collection }), wiat: 10 }, '/typo/{id}'), 'an unknown key').to.throw(TypeError, /Unknown option `plugins\.monglock\.wiat` of POST \/typo\/\{id\}/);
    late({ lock: writeLock({ collection }) }, '/good/{id}')();
    expect((await server.inject({ method: 'POST', url: '/good/c' })).result, 'a good route added late serves requests').to.equal('late');
  });
});

describe('hapi plugin registration', () => {
  it('refuses invalid plugin options at register, not with a 500 per request', async () => {
    for (const [options, message] of [
      [{ boom: {} }, /monglock plugin option `boom`.*boom module/],
      [{ boom: 'boom' }, /boom module/],
      [{ bom: {} }, /Unknown monglock plugin option `bom`: expected boom/],
      ['boom', /options to be an object/],
    ] as const) {
      const server = Hapi.server({ debug: false });
      const error = await rejectionOf(server.register({ plugin: monglockPlugin, options: options as never }));
      expect(error.message).to.match(message);
    }
  });

  it('takes its version from package.json, and registers once', async () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    expect(monglockPlugin.version).to.equal((require('../../../package.json') as { version: string }).version);
    const server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    await server.register({ plugin: monglockPlugin }); // a second plugin that depends on it may register it again
    expect((server.registrations as Record<string, { version: string } | undefined>).monglock?.version).to.equal(monglockPlugin.version);
  });

  it('a locked route on a server without the plugin runs without a lock, and lockOf() says the plugin is not registered and how to register it', async () => {
    const collection = await freshCollection([{ _id: 'o' }]);
    const lockedRoute = (lock: ReturnType<typeof writeLock>, lockedDuringHandler: number[]): Hapi.ServerRoute => ({
      method: 'POST',
      path: '/orders/{id}',
      options: {
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
        handler: async (request) => {
          lockedDuringHandler.push((await heldIds(collection, request.params.id)).length);
          try {
            return lockOf(request);
          } catch (error) {
            return (error as Error).message;
          }
        },
      },
    });
    const withoutPlugin = Hapi.server({ debug: false });
    const lockedDuringHandler: number[] = [];
    withoutPlugin.route(lockedRoute(writeLock({ collection }), lockedDuringHandler));
    const response = await withoutPlugin.inject({ method: 'POST', url: '/orders/o' });
    expect({ status: response.statusCode, lockedDuringHandler }, 'the failure mode: the route runs, unlocked').to.deep.equal({ status: 200, lockedDuringHandler: [0] });
    expect(response.payload, 'lockOf() names the cause and the cure').to.equal(
      "monglock: the plugin is not registered on the server of POST /orders/{id}, so its `plugins.monglock` is ignored and it runs without a lock: register it on that server (`await server.register({ plugin: monglockPlugin })`, from 'monglock/hapi')",
    );
  });

  it('with the plugin registered, lockOf() says when the route has no monglock configuration, and when the lock is not acquired yet', async () => {
    const collection = await freshCollection([{ _id: 'o' }]);
    const messageOf = (request: Hapi.Request): string => {
      try {
        lockOf(request);
        return 'no error';
      } catch (error) {
        return (error as Error).message;
      }
    };
    const early: string[] = [];
    const server = await makeServer((s) => {
      s.route({ method: 'GET', path: '/plain', handler: (request) => messageOf(request) });
      s.route({
        method: 'POST',
        path: '/orders/{id}',
        options: {
          ext: { onPostAuth: { method: (request, h) => (early.push(messageOf(request)), h.continue) } },
          plugins: { monglock: { lock: writeLock({ collection }), filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: (request) => messageOf(request),
        },
      });
    });
    expect((await server.inject('/plain')).payload).to.equal('Route GET /plain has no monglock configuration (`options.plugins.monglock`)');
    expect((await server.inject({ method: 'POST', url: '/orders/o' })).payload, 'from the handler').to.equal('no error');
    expect(early, 'from an extension before onPreHandler').to.deep.equal([
      "monglock: the lock of POST /orders/{id} is not acquired yet (in onPreHandler): call lockOf(request) from the route's pre methods or handler",
    ]);
  });

  it("an app plugin that adds locked routes and declares `dependencies: 'monglock'` makes initialize() fail on a server without it", async () => {
    const collection = await freshCollection([]);
    const lock = writeLock({ collection });
    const orders: Hapi.Plugin<void> = {
      name: 'orders',
      dependencies: 'monglock',
      register: (server) =>
        server.route({ method: 'POST', path: '/orders/{id}', options: { plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } }, handler: () => 'ok' } }),
    };
    const without = Hapi.server({ debug: false });
    await without.register(orders);
    expect((await rejectionOf(without.initialize())).message).to.match(/missing dependency monglock/);
    const withIt = Hapi.server({ debug: false });
    await withIt.register(orders);
    await withIt.register({ plugin: monglockPlugin });
    await withIt.initialize();
    await withIt.stop();
  });
});

/*
 * The hapi route option `document`. The defects guarded against:
 * - the route checked it against the default lock field name (`lock`), not the route's lock's
 *   `field`: a route whose lock keeps its lock in `mutex` and excludes it (`document: { mutex: 0 }`)
 *   passed server.initialize() (which is there so that "a misconfigured route fails
 *   server.initialize()/start(), not its first request") and then answered 500 to every request;
 * - a projection without `_id` (`document: { _id: 0, balance: 1 }`) was accepted, and every
 *   request's lock was then addressed by `{ _id: undefined }`: the plugin's release after the
 *   response failed (logged) and the lock stayed held until its lease ended, so the next request
 *   for the same document was refused (409).
 */
describe('the hapi route option document', () => {
  afterEach(stopServers);

  it('excluding the lock\'s own field (not named lock) fails server.initialize(), not every request', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 1 }]);
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}',
        options: {
          plugins: { monglock: { lock: writeLock({ collection, field: 'mutex' }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: { mutex: 0 } } },
          handler: () => 'ok',
        },
      }),
    );
    const initialized = await server.initialize().then(
      () => 'initialized',
      (error: Error) => error.message,
    );
    const status = initialized === 'initialized' ? (await server.inject({ method: 'POST', url: '/accounts/a' })).statusCode : undefined;
    expect({ initialized, status }).to.not.deep.equal({ initialized: 'initialized', status: 500 });
    expect(initialized).to.match(/mutex/);
  });

  it('document: { _id: 0, balance: 1 }: the next request for the document gets the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/accounts/{id}',
        options: {
          plugins: { monglock: { lock: writeLock({ collection, locktimeout: 10_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: { _id: 0, balance: 1 } } },
          handler: (request) => ((request.plugins.monglock as unknown as { document: { balance: number } }).document.balance),
        },
      }),
    );
    await server.initialize();
    const first = await server.inject({ method: 'GET', url: '/accounts/a' });
    await sleep(100); // the plugin releases after the response
    const second = await server.inject({ method: 'GET', url: '/accounts/a' });
    expect([first.statusCode, second.statusCode]).to.deep.equal([200, 200]);
  });
});
