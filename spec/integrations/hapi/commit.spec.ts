/**
 * A hapi handler's commit is applied only while its answer can still carry it: never after the
 * response went out (a server timeout answered 503, so the client may retry), checked again after
 * every await before the write.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, writeLock } from '../../../lib';
import { CommitRequest } from '../../../lib/locks/commit';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
import { secondCopyOfCommit } from '../../support/second-copy';
import { heldIds, makeServer, released, stopServers } from '../../support/hapi-server';

const ITEMS = [
  { sku: 'x', qty: 1 },
  { sku: 'y', qty: 2 },
];

/** A server whose route sets the quantity of the cart's item `sku` to 9 with a positional `$`, by `commit(update, value, { match })`. */
async function cartServer(collection: Collection<Document>): Promise<Hapi.Server> {
  const server = await makeServer((s) =>
    s.route({
      method: 'POST',
      path: '/carts/{id}/items/{sku}',
      options: {
        plugins: { monglock: { lock: writeLock({ collection, locktimeout: 5_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
        handler: (request) => commit({ $set: { 'items.$.qty': 9 } }, { sku: request.params.sku as string }, { match: { 'items.sku': request.params.sku as string } }),
      },
    }),
  );
  await server.initialize();
  return server;
}

describe('hapi: a handler that returns commit()', () => {
  afterEach(stopServers);

  // README: the handler "answers `value` once the update and the release are applied together".
  // The defect guarded against: a handler that returned commit() after hapi had already answered
  // (a server timeout: 503) still had its update applied, so a client that retried the 503 applied
  // it twice. As the plugin stops a wait for the lock once the answer went out, it refuses the
  // commit (and releases the lock without it).
  it('a handler that commits after a server timeout (503) writes nothing', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock: writeLock({ collection, locktimeout: 5_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: true } },
          handler: async (request) => {
            const { document } = (request.plugins.monglock as unknown as { document: { balance: number } });
            await sleep(300); // slower than the route's timeout
            return commit({ $set: { balance: document.balance - 30 } }, { balance: document.balance - 30 });
          },
        },
      }),
    );
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    await sleep(500); // the handler finishes
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance;
    console.log(`      the client got ${response.statusCode}; balance ${balance}`);
    expect({ status: response.statusCode, balance }).to.deep.equal({ status: 503, balance: 100 });
  });

  it('a commit is sent once hapi settled on the answer: a commit write slower than the server timeout is answered with its value, never a 503 beside an applied update', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    let timedOut = false;
    // The commit (the write after the acquisition) takes 1.5 s to reach the server, three times the route's timeout.
    const slow = delayedCollection(collection, { request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? undefined : 1_500) });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          timeout: { server: 500 },
          plugins: { monglock: { lock: writeLock({ collection: slow, locktimeout: 10_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: true } },
          handler: (request) => {
            const { document } = request.plugins.monglock as unknown as { document: { balance: number } };
            return commit({ $set: { balance: document.balance - 30 } }, { balance: document.balance - 30 });
          },
        },
      }),
    );
    server.events.on({ name: 'request', channels: 'internal' }, (_request, event) => {
      if (event.tags.includes('timeout')) timedOut = true;
    });
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance;
    expect({ status: response.statusCode, result: response.result, balance, timedOut }, 'the answer says what was applied').to.deep.equal({ status: 200, result: { balance: 70 }, balance: 70, timedOut: false });
    expect(await heldIds(collection, 'a'), 'released with the commit').to.deep.equal([]);
  });

  it('h.response(commit(update, value)).code(201) applies the update and answers the value with its status; a commit of another copy of monglock is a 500 and writes nothing', async () => {
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection, locktimeout: 5_000 });
    // What commit() of a second copy of monglock in node_modules returns: the same class, loaded twice.
    const OtherCopy = secondCopyOfCommit();
    expect(OtherCopy, 'a second copy of the class').not.to.equal(CommitRequest);
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/accounts/{id}/created',
        options: {
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: (_request, h) => h.response(commit({ $inc: { balance: -30 } }, { debited: 30 })).code(201).header('x-debit', '30'),
        },
      });
      s.route({
        method: 'POST',
        path: '/accounts/{id}/other-copy',
        options: {
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: () => new OtherCopy({ $inc: { balance: -1 } }, { debited: 1 }),
        },
      });
    });
    await server.initialize();
    const created = await server.inject({ method: 'POST', url: '/accounts/a/created' });
    expect({ status: created.statusCode, payload: JSON.parse(created.payload), header: created.headers['x-debit'] }).to.deep.equal({ status: 201, payload: { debited: 30 }, header: '30' });
    expect((await collection.findOne({ _id: 'a' as never }))?.balance, 'the wrapped commit was applied').to.equal(70);
    const foreign = await server.inject({ method: 'POST', url: '/accounts/a/other-copy' });
    expect(foreign.statusCode, 'a commit this copy cannot apply').to.equal(500);
    expect((await collection.findOne({ _id: 'a' as never }))?.balance, 'nothing written').to.equal(70);
    await released(collection, 'a');
  });

  it('a commit whose value cannot be sent as JSON is a 500 that writes nothing (not a 500 for an update that was applied)', async () => {
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    const circular: Record<string, unknown> = { note: 'refers to itself' };
    circular.self = circular;
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/{value}',
        options: {
          plugins: { monglock: { lock: writeLock({ collection, locktimeout: 5_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: (request) => commit({ $inc: { balance: -1 } }, request.params.value === 'bigint' ? { balance: 99n } : request.params.value === 'circular' ? circular : { balance: 99 }),
        },
      }),
    );
    await server.initialize();
    for (const value of ['bigint', 'circular']) {
      expect((await server.inject({ method: 'POST', url: `/accounts/a/${value}` })).statusCode, value).to.equal(500);
      expect((await collection.findOne({ _id: 'a' as never }))?.balance, `${value}: nothing written`).to.equal(100);
      await released(collection, 'a');
    }
    expect((await server.inject({ method: 'POST', url: '/accounts/a/plain' })).result, 'a value that serializes').to.deep.equal({ balance: 99 });
    expect((await collection.findOne({ _id: 'a' as never }))?.balance).to.equal(99);
  });

  it('commit(update, value, { match }) with a positional $ update: the element match selects is updated, the value answered, the lock released', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const server = await cartServer(collection);
    const response = await server.inject({ method: 'POST', url: '/carts/cart/items/y' });
    expect({ status: response.statusCode, payload: response.result }).to.deep.equal({ status: 200, payload: { sku: 'y' } });
    expect((await collection.findOne({ _id: 'cart' as never }))?.items, 'only the matched element').to.deep.equal([{ sku: 'x', qty: 1 }, { sku: 'y', qty: 9 }]);
    expect(await heldIds(collection, 'cart'), 'the commit released the lock').to.deep.equal([]);
  });

  it('commit(update, value, { match }) whose match the document fails: 404, nothing written, and the lock is still released', async () => {
    const collection = await freshCollection([{ _id: 'cart', items: ITEMS }]);
    const server = await cartServer(collection);
    const response = await server.inject({ method: 'POST', url: '/carts/cart/items/z' });
    expect((await collection.findOne({ _id: 'cart' as never }))?.items, 'nothing written').to.deep.equal(ITEMS);
    await released(collection, 'cart'); // within 2 s of its 5 s lease: released, not run out
    const again = await server.inject({ method: 'POST', url: '/carts/cart/items/x' });
    expect(again.statusCode, 'the next request gets the lock').to.equal(200);
    expect((await collection.findOne({ _id: 'cart' as never }))?.items).to.deep.equal([{ sku: 'x', qty: 9 }, { sku: 'y', qty: 2 }]);
    // The commit's RessourceNotFound, answered as boom (the plugin's) like every other lock outcome.
    expect(response.statusCode, `the refused commit answered ${response.payload}`).to.equal(404);
  });

  it('while the lease keeper extension is held back past the lease: the commit is refused (the lease may have ended), nothing is written, and the answer says so', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    // The keeper's first extension (the second findOneAndUpdate) is held until the test opens the gate.
    let extensionStarted!: () => void;
    const started = new Promise<void>((resolve) => (extensionStarted = resolve));
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const slow = delayedCollection(collection, {
      request: (method, n) => {
        if (method !== 'findOneAndUpdate' || n !== 2) return 0;
        extensionStarted();
        return gate;
      },
    });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          timeout: { server: 1_600 },
          plugins: { monglock: { lock: writeLock({ collection: slow, locktimeout: 2_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: true } },
          handler: async (request) => {
            const { document } = request.plugins.monglock as unknown as { document: { balance: number } };
            await started; // the keeper extends at half the lease: its extension is now in flight
            return commit({ $set: { balance: document.balance - 30 } }, { balance: document.balance - 30 });
          },
        },
      }),
    );
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    openGate(); // the extension completes after the answer went out; the commit must not follow it
    await sleep(500);
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance;
    expect(balance, 'nothing written').to.equal(100);
    // 409: the lease lapsed while the extension was held back; 503 on a machine so loaded that hapi's timer fired first.
    expect([409, 503], `answered ${response.statusCode}: not applied`).to.include(response.statusCode);
    // The lock was released without the update.
    expect((await collection.findOne({ _id: 'a' as never }))?.lock?.tags?.write ?? []).to.have.length(0);
  });
});
