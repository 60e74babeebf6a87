/**
 * The hapi plugin with `filters`: a route that locks several documents together, all or nothing,
 * with the same lifecycle as a one-document route (released once the response is out and nothing
 * of the route runs), and `commitAll` from its handler.
 */
import * as Boom from '@hapi/boom';
import { expect } from 'chai';
import { commitAll, writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { delayedCollection } from '../../../stress/delayed-collection';
import { commandsSentBy, freshCollection, sleep } from '../../support/fixture';
import { heldIds, makeServer, responseOf, send, stopServers } from '../../support/hapi-server';

describe('hapi plugin: a route that locks several documents (`filters`)', function () {
  this.timeout(30_000);
  afterEach(stopServers);

  it('a transfer route: both accounts locked while the handler runs, each update applied by its release; concurrent opposite transfers all finish', async () => {
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }, { _id: 'b', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000, boom: Boom });
    let inside = 0;
    let most = 0;
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/transfer/{from}/{to}',
        options: {
          plugins: { monglock: { lock, filters: (request) => [{ _id: request.params.from }, { _id: request.params.to }], wait: 20_000, document: { balance: 1 } } },
          handler: async (request) => {
            const { locks } = lockOf(request);
            inside++;
            most = Math.max(most, inside);
            expect(await heldIds(accounts, 'a')).to.have.length(1);
            expect(await heldIds(accounts, 'b')).to.have.length(1);
            await sleep(5);
            inside--;
            const [from] = locks!;
            return commitAll([{ $inc: { balance: -1 } }, { $inc: { balance: 1 } }], { before: from!.document!.balance });
          },
        },
      }),
    );
    await server.start();
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => send(server.info.port as number, 'POST', i % 2 ? '/transfer/a/b' : '/transfer/b/a')));
    expect(statuses).to.deep.equal(Array.from({ length: 20 }, () => 200));
    expect(most, 'one transfer inside at a time').to.equal(1);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => doc.balance)).to.deep.equal([100, 100]);
    expect(docs.map((doc) => doc.lock.committed.length)).to.deep.equal([20, 20]);
    expect([await heldIds(accounts, 'a'), await heldIds(accounts, 'b')]).to.deep.equal([[], []]);
  });

  it('one document held elsewhere: 409 naming the refused filter, the other left unlocked; a missing one 404', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const other = await lock.acquire({ _id: 2 });
    let refusal: unknown;
    const server = await makeServer((s) => {
      s.ext('onPreResponse', (request, h) => {
        if ('isBoom' in request.response) refusal = (request.response as Boom.Boom).data;
        return h.continue;
      });
      s.route({
        method: 'POST',
        path: '/pair/{x}/{y}',
        options: { plugins: { monglock: { lock, filters: (request) => [{ _id: Number(request.params.x) }, { _id: Number(request.params.y) }] } }, handler: () => 'ok' },
      });
    });
    await server.start();
    expect(await send(server.info.port as number, 'POST', '/pair/1/2')).to.equal(409);
    expect(refusal).to.deep.equal({ request: 1 });
    expect(await heldIds(accounts, 1)).to.deep.equal([]);
    expect(await send(server.info.port as number, 'POST', '/pair/1/3')).to.equal(404);
    await other.release();
    expect(await send(server.info.port as number, 'POST', '/pair/2/1')).to.equal(200);
    await sleep(100);
    expect([await heldIds(accounts, 1), await heldIds(accounts, 2)]).to.deep.equal([[], []]);
  });

  it('is released after a server timeout only once the handler finished, and its commit is then refused', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    let heldDuringHandler: number[] = [];
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/slow',
        options: {
          timeout: { server: 50 },
          plugins: { monglock: { lock, filters: () => [{ _id: 2 }, { _id: 1 }] } },
          handler: async () => {
            await sleep(300);
            heldDuringHandler = [(await heldIds(accounts, 1)).length, (await heldIds(accounts, 2)).length];
            return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }]);
          },
        },
      }),
    );
    await server.start();
    expect(await send(server.info.port as number, 'GET', '/slow')).to.equal(503);
    await sleep(600);
    expect(heldDuringHandler, 'still held while the handler ran past the answer').to.deep.equal([1, 1]);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length])).to.deep.equal([[0, 0], [0, 0]]);
  });

  it('a client that disconnects while its group waits stops the wait: no attempt after the response, nothing held, the handler never runs', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 60_000 });
    const holder = await writeLock({ collection: accounts }).acquire({ _id: 2 });
    let handlerRuns = 0;
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/pair',
        options: {
          plugins: { monglock: { lock, filters: () => [{ _id: 1 }, { _id: 2 }], wait: 10_000 } },
          handler: () => {
            handlerRuns++;
            return 'done';
          },
        },
      }),
    );
    await server.start();
    const answered = responseOf(server, '/pair');
    expect(await send(server.info.port as number, 'GET', '/pair', 150)).to.equal(0);
    expect(await answered).to.equal(499);
    // Aborted with the response: once the holder lets go, no attempt starts (one in flight may still land, and is released).
    const after = await commandsSentBy(async () => {
      await holder.release();
      await sleep(400);
    });
    expect(after.commands.filter((name) => name === 'findAndModify'), 'no acquisition attempt after the response').to.deep.equal([]);
    await sleep(100);
    expect([await heldIds(accounts, 1), await heldIds(accounts, 2)]).to.deep.equal([[], []]);
    expect(handlerRuns).to.equal(0);
  });

  it('refuses bad route options when the server initializes: both filter and filters, filters with checkout', async () => {
    const accounts = await freshCollection();
    const lock = writeLock({ collection: accounts });
    const both = await makeServer((s) => s.route({ method: 'GET', path: '/x', options: { plugins: { monglock: { lock, filter: () => ({}), filters: () => [] } as never }, handler: () => 'ok' } }));
    expect((await both.initialize().then(() => undefined, (error: Error) => error))?.message).to.match(/either `plugins.monglock.filter`.*or `plugins.monglock.filters`/);
    const checkout = await makeServer((s) => s.route({ method: 'GET', path: '/y', options: { plugins: { monglock: { lock, filters: () => [], mode: 'checkout' } }, handler: () => 'ok' } }));
    expect((await checkout.initialize().then(() => undefined, (error: Error) => error))?.message).to.match(/checkout/);
  });

  it('a commitAll is sent once hapi settled on the answer: a commit write slower than the server timeout is finished and answered (not 503 with half of it applied); nothing is sent after the answer', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    /** Each updateOne sent: its number, when, and whether it carries the caller's update (a commit) or only releases. */
    const sent: Array<[number, number, 'commit' | 'release']> = [];
    const started = Date.now();
    // The reply of the first commit (an updateOne) comes back slowly: the server timeout answers meanwhile.
    const slow = delayedCollection(accounts, {
      request: (method, n, args) => {
        if (method === 'updateOne') sent.push([n, Date.now() - started, '$inc' in (args[1] as object) ? 'commit' : 'release']);
        return undefined;
      },
      reply: (method, n) => (method === 'updateOne' && n === 1 ? 400 : undefined),
    });
    const lock = writeLock({ collection: slow, locktimeout: 10_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/pair',
        options: {
          timeout: { server: 150 },
          plugins: { monglock: { lock, filters: () => [{ _id: 1 }, { _id: 2 }] } },
          handler: () => commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], 'ok'),
        },
      }),
    );
    await server.start();
    const status = await send(server.info.port as number, 'GET', '/pair');
    const answeredAt = Date.now() - started;
    await sleep(300);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const late = sent.filter(([, at]) => at > answeredAt);
    const what = `answered ${status} at ${answeredAt} ms; updateOne calls sent at ${JSON.stringify(sent)}; documents hold n = ${JSON.stringify(docs.map((doc) => doc.n))}`;
    expect(late, what).to.deep.equal([]);
    expect(status, what).to.equal(200);
    // Both commits applied, both locks released with them.
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length]), what).to.deep.equal([[1, 0], [1, 0]]);
  });

  it('a group whose lease is lost while the handler runs (a lock force-released elsewhere) is answered 409 LockNotFound, as a one-document route is, and nothing is committed', async () => {
    const docs = await freshCollection([{ _id: 'p', n: 0 }, { _id: 'q', n: 0 }]);
    const lock = writeLock({ collection: docs, locktimeout: 1_000 }); // no boom of its own: the plugin's
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/pair',
        options: {
          plugins: { monglock: { lock, filters: () => [{ _id: 'p' }, { _id: 'q' }] } },
          handler: async (request) => {
            const { signal } = lockOf(request);
            await writeLock({ collection: docs }).release({ _id: 'q' }); // v2's forced release, proof-less
            // The next extension is refused: the signal aborts; the handler commits all the same.
            await Promise.race([new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })), sleep(3_000)]);
            return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], 'done');
          },
        },
      }),
    );
    await server.start();
    const response = await fetch(`${server.info.uri}/pair`, { method: 'POST' });
    expect([response.status, ((await response.json()) as { message?: string }).message]).to.deep.equal([409, 'LockNotFound']);
    expect((await docs.find().sort({ _id: 1 }).toArray()).map((doc) => doc.n)).to.deep.equal([0, 0]);
  });
});
