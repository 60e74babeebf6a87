/**
 * A hapi handler's commit is applied only while its answer can still carry it: never after the
 * response went out (a server timeout answered 503, so the client may retry), checked again after
 * every await before the write.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
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

  it('while the lease keeper extension is in flight, and hapi answers 503 meanwhile: nothing is written', async function () {
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
    openGate(); // the extension completes after the 503 went out; the commit would follow it
    await sleep(500);
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance;
    expect({ status: response.statusCode, balance }).to.deep.equal({ status: 503, balance: 100 });
    // The lock was released without the update.
    expect((await collection.findOne({ _id: 'a' as never }))?.lock?.tags?.write ?? []).to.have.length(0);
  });
});
