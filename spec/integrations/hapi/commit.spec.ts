/**
 * A hapi handler's commit is applied with the release once hapi has settled on the answer, and
 * only when that answer is no failure: the client is told what was applied. Never behind a 503
 * (the client may retry), never for an answer that failed validation or that an earlier plugin's
 * onPreResponse replaced, never after the lease was lost or given up.
 */
import { Readable } from 'node:stream';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, writeLock, type Commit } from '../../../lib';
import { CommitRequest } from '../../../lib/locks/commit';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
import { secondCopyOfCommit } from '../../support/second-copy';
import { debitRoute, heldIds, makeServer, released, stopServers } from '../../support/hapi-server';
import { monglockPlugin } from '../../../lib/hapi';

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

/** A commit of 30 off the balance of the document the route locked with `document: true`, answering the new balance. */
function debitFrom(request: Hapi.Request): Commit<{ balance: number }> {
  const { document } = request.plugins.monglock as unknown as { document: { balance: number } };
  return commit({ $set: { balance: document.balance - 30 } }, { balance: document.balance - 30 });
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
    const lock = writeLock({ collection, locktimeout: 5_000 });
    const server = await makeServer((s) =>
      s.route(
        debitRoute(lock, {
          timeout: { server: 100 },
          monglock: { document: true },
          handler: async (request) => {
            await sleep(300); // slower than the route's timeout
            return debitFrom(request);
          },
        }),
      ),
    );
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    await released(collection, 'a'); // the handler has finished: its release (without the update) is done
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
    const server = await makeServer((s) => s.route(debitRoute(writeLock({ collection: slow, locktimeout: 10_000 }), { timeout: { server: 500 }, monglock: { document: true }, handler: debitFrom })));
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
      s.route(
        // A call timeout far past the test's: the answer must not wait for the extension held back.
        debitRoute(writeLock({ collection: slow, locktimeout: 2_000, timeout: 60_000 }), {
          timeout: { server: 1_600 },
          monglock: { document: true },
          handler: async (request) => {
            await started; // the keeper extends at half the lease: its extension is now in flight
            return debitFrom(request);
          },
        }),
      ),
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

  it('a commit returned before hapi\'s server timeout fired (an onPostHandler extension still ran) is not applied when the answer is 503', async function () {
    this.timeout(15_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    // An audit step after the handler, slower than what is left of the server timeout.
    const audit: Hapi.RouteExtObject = { method: async (_request, h) => (await sleep(600), h.continue) };
    const server = await makeServer((s) => s.route(debitRoute(lock, { timeout: { server: 200 }, ext: { onPostHandler: audit } })));
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/accounts/a/debit`, { method: 'POST' });
    const body = await answer.text();
    const stored = await accounts.findOne({ _id: 'a' as never });
    const what = `answered ${answer.status} ${body}; stored balance ${String(stored?.balance)}`;
    expect({ status: answer.status, balance: stored?.balance }, `a 503 and nothing written, so the client's retry debits once (${what})`).to.deep.equal({ status: 503, balance: 100 });
    await released(accounts, 'a'); // once the onPostHandler extension has ended (it runs under the lock)
    expect((await accounts.findOne({ _id: 'a' as never }))?.balance, `released without the update (${what})`).to.equal(100);
  });

  it('a commit whose value fails the route\'s response validation is not applied: the 500 says nothing was written', async () => {
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    // The answer must be { balance: number }; this handler answers a string balance.
    const schema = async (value: unknown): Promise<unknown> => {
      if (typeof (value as { balance?: unknown } | null)?.balance !== 'number') throw new Error('balance must be a number');
      return value;
    };
    const server = await makeServer((s) => s.route(debitRoute(lock, { response: { schema }, handler: () => commit({ $inc: { balance: -30 } }, { balance: '70' }) })));
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    const stored = await accounts.findOne({ _id: 'a' as never });
    const applied = stored?.balance === 70;
    const what = `answered ${response.statusCode} ${response.payload}; stored balance ${String(stored?.balance)}`;
    expect(applied && response.statusCode >= 500, `a failure answered for an applied commit (${what})`).to.equal(false);
    expect({ status: response.statusCode, balance: stored?.balance }, `failed validation: 500, nothing written (${what})`).to.deep.equal({ status: 500, balance: 100 });
    await released(accounts, 'a');
  });

  it('a commit returned after maxHold released the lock is answered with a failure, never with its value while nothing was written', async function () {
    this.timeout(10_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const handler = async (): Promise<unknown> => {
      await sleep(800); // ignores its signal: maxHold releases the lock meanwhile
      return commit({ $inc: { balance: -30 } }, { debited: 30 });
    };
    const server = await makeServer((s) => s.route(debitRoute(lock, { monglock: { maxHold: 200 }, handler })));
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    const account = await accounts.findOne({ _id: 'a' as never });
    const applied = account?.balance === 70;
    if (!applied) {
      expect(response.statusCode, `answered ${response.statusCode} ${response.payload} although the commit was not applied (balance ${String(account?.balance)})`).to.be.at.least(400);
    } else {
      expect(response.statusCode, `the update was applied but the answer is ${response.statusCode}`).to.equal(200);
    }
    expect({ applied, held: await heldIds(accounts, 'a') }, 'maxHold had released the lock: nothing applied after it').to.deep.equal({ applied: false, held: [] });
  });

  it('a success answer means the update was applied, also when a plugin registered before monglock takes over in onPreResponse (an envelope around every success)', async () => {
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const server = Hapi.server({ debug: false });
    try {
      await server.register({
        name: 'envelope',
        register(s: Hapi.Server) {
          s.ext('onPreResponse', (request, h) => {
            const response = request.response as { isBoom?: boolean; source?: unknown; statusCode?: number };
            if (response.isBoom) return h.continue;
            return h.response({ data: response.source }).code(response.statusCode ?? 200).takeover();
          });
        },
      });
      await server.register({ plugin: monglockPlugin });
      server.route(debitRoute(lock));
      await server.initialize();
      const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
      await released(accounts, 'a');
      const account = await accounts.findOne({ _id: 'a' as never });
      if (response.statusCode < 400) {
        expect(account?.balance, `answered ${response.statusCode} ${response.payload}, but the commit was not applied`).to.equal(70);
      } else {
        expect(account?.balance, `answered ${response.statusCode} ${response.payload}, but the commit was applied`).to.equal(100);
      }
      expect(JSON.parse(response.payload), 'the envelope around the commit\'s value').to.deep.equal({ data: { debited: 30 } });
    } finally {
      await server.stop();
    }
  });

  for (const returns of ['stream', 'commit(update, stream)'] as const) {
    it(`no stream body is read without the route's lock (handler returns ${returns}): a stream is read under it, a commit with a stream value refused`, async function () {
      this.timeout(10_000);
      const reports = await freshCollection([{ _id: 'r', status: 'open' }]);
      const lock = writeLock({ collection: reports, locktimeout: 5_000 });
      const other = writeLock({ collection: reports, locktimeout: 5_000 }); // another client
      let takenMeanwhile: string | undefined;
      const body = (): Readable => {
        let step = 0;
        return new Readable({
          read() {
            step++;
            if (step === 1) return void this.push('part one,');
            if (step > 2) return void this.push(null);
            // While hapi reads the body: another caller tries the lock.
            void other.acquire({ _id: 'r' }).then(
              async (taken) => {
                takenMeanwhile = taken.id;
                await taken.release();
                this.push('part two');
              },
              () => this.push('part two'),
            );
          },
        });
      };
      const server = await makeServer((s) =>
        s.route({
          method: 'GET',
          path: '/reports/{id}',
          options: {
            plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
            handler: () => (returns === 'stream' ? body() : commit({ $set: { status: 'sent' } }, body())),
          },
        }),
      );
      const response = await server.inject({ method: 'GET', url: '/reports/r' });
      expect(takenMeanwhile, `another caller took the route's lock (${String(takenMeanwhile)}) while hapi read its stream body`).to.equal(undefined);
      if (returns === 'stream') {
        expect(response.statusCode, `the route answered (${response.payload})`).to.equal(200);
        expect(response.payload, 'the whole body went out').to.equal('part one,part two');
        return;
      }
      expect(response.statusCode, `a commit with a stream value is refused (${response.payload})`).to.equal(500);
      expect((await reports.findOne({ _id: 'r' as never }))?.status, 'nothing written').to.equal('open');
    });
  }

  it('a commit whose reply is lost is settled before the answer, while another client competes: the answer says what landed, and the competitor sees it', async function () {
    this.timeout(20_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    // The commit (the route's first updateOne) lands; its reply never comes back (the call's timeout, 1 s, ends the wait).
    let commitSent!: () => void;
    const sent = new Promise<void>((resolve) => (commitSent = resolve));
    const lossy = delayedCollection(accounts, {
      request: (method, n) => void (method === 'updateOne' && n === 1 && commitSent()),
      reply: (method, n) => (method === 'updateOne' && n === 1 ? new Promise(() => undefined) : undefined),
    });
    const server = await makeServer((s) => s.route(debitRoute(writeLock({ collection: lossy, locktimeout: 5_000, timeout: 1_000 }))));
    const competitor = writeLock({ collection: accounts, locktimeout: 5_000 });
    const answering = server.inject({ method: 'POST', url: '/accounts/a/debit' });
    await sent; // the route held the lock, and its commit is on its way
    const competing = competitor.acquire({ _id: 'a' }, { wait: 10_000, document: true });
    const [response, rival] = await Promise.all([answering, competing]);
    const balance = (await accounts.findOne({ _id: 'a' as never }))?.balance;
    expect({ status: response.statusCode, result: response.result, balance }, 'the commit landed: settled as applied, answered with its value').to.deep.equal({ status: 200, result: { debited: 30 }, balance: 70 });
    expect(rival.document?.balance, 'the competitor got the lock after the commit, and sees it').to.equal(70);
    await rival.release();
  });
});
