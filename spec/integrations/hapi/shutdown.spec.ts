/**
 * A graceful `server.stop()` with the usual `onPostStop → client.close()`: the plugin's releases,
 * the commits on their way, the acquisitions still waiting and the route code that still runs
 * under a lock end before the application closes its client, so no document stays locked for the
 * rest of its lease and no write is cut in the middle.
 */
import { request as httpRequest, type ClientRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commitAll, writeLock } from '../../../lib';
import { lockOf, monglockPlugin } from '../../../lib/hapi';
import { delayedCollection, type Delays } from '../../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../../support/fixture';
import { heldIds } from '../../support/hapi-server';

type Order = 'plugin registered first' | "application's onPostStop declared first, after: 'monglock'";

/**
 * A server with the monglock plugin whose application closes its own driver client in
 * `onPostStop`, in the given `order` with the plugin's, and `collection`: `seeded` on that client
 * (with `delays`, if given). Stopped by the test.
 */
async function applicationServer(seeded: Collection<Document>, order: Order = 'plugin registered first', delays?: Delays): Promise<{ server: Hapi.Server; collection: Collection<Document> }> {
  const client = await newClient();
  const plain = client.db(seeded.dbName).collection(seeded.collectionName);
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  const closeClient = (): Promise<void> => client.close();
  if (order === 'plugin registered first') {
    await server.register({ plugin: monglockPlugin });
    server.ext('onPostStop', closeClient);
  } else {
    server.ext('onPostStop', closeClient, { after: 'monglock' });
    await server.register({ plugin: monglockPlugin });
  }
  return { server, collection: delays ? delayedCollection(plain, delays) : plain };
}

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

describe('hapi: graceful shutdown', () => {
  for (const order of ['plugin registered first', "application's onPostStop declared first, after: 'monglock'"] as const) {
    it(`server.stop() waits for route code still running after a 503 and its release before the application's onPostStop closes the client (${order})`, async function () {
      this.timeout(20_000);
      const seeded = await freshCollection([{ _id: 'a' }]);
      const { server, collection } = await applicationServer(seeded, order);
      const lock = writeLock({ collection, locktimeout: 30_000 });
      await (await lock.acquire({ _id: 'a' })).release(); // the server's clock is known: the route's acquisition is one command
      let sawAbort = false;
      server.route({
        method: 'POST',
        path: '/docs/{id}/slow',
        options: {
          timeout: { server: 500 }, // the lock is taken well within it on a loaded machine (not always within 100 ms)
          plugins: { monglock: { lock, filter: byId } },
          handler: async (request) => {
            const { signal } = lockOf(request);
            // Slower than the server timeout: hapi answers 503 while this runs; the stop's abort ends it early.
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 5_000);
              signal.addEventListener('abort', () => {
                sawAbort = true;
                clearTimeout(timer);
                resolve();
              });
            });
            await sleep(200); // what route code does to wind down, still under the lock
            return 'done';
          },
        },
      });
      await server.start();
      const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a/slow`, { method: 'POST' });
      expect(answer.status, 'hapi answered while the handler runs').to.equal(503);
      expect(await heldIds(seeded, 'a'), 'the handler still holds the lock').to.have.length(1);
      await server.stop({ timeout: 1_000 });
      expect(sawAbort, 'the route code still running was told to stop (lockOf(request).signal)').to.equal(true);
      expect(await heldIds(seeded, 'a'), 'released before the client closed, not left for its 30 s lease').to.deep.equal([]);
    });
  }

  it('no extension of the lock is written once server.stop() began, for route code that ignores its signal: the lease the stop waits for is its last', async function () {
    this.timeout(20_000);
    const seeded = await freshCollection([{ _id: 'a' }]);
    const { server, collection } = await applicationServer(seeded);
    const lock = writeLock({ collection, locktimeout: 2_000 });
    await (await lock.acquire({ _id: 'a' })).release(); // the server's clock is known: the route's acquisition is one command
    server.route({
      method: 'POST',
      path: '/docs/{id}/slow',
      options: {
        timeout: { server: 500 }, // the lock is taken well within it on a loaded machine (not always within 100 ms)
        plugins: { monglock: { lock, filter: byId } },
        handler: async () => {
          await sleep(4_000); // ignores its signal
          return 'done';
        },
      },
    });
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a/slow`, { method: 'POST' });
    expect(answer.status, 'hapi answered while the handler runs').to.equal(503);
    const expiryOf = async (): Promise<number[]> => ((await seeded.findOne({ _id: 'a' as never }))?.lock?.tags?.write ?? []).map((entry: { exp: Date }) => entry.exp.getTime());
    const atStop = await expiryOf();
    expect(atStop, 'held by the handler when the stop begins').to.have.length(1);
    await server.stop({ timeout: 1_000 });
    const afterStop = await expiryOf();
    expect(afterStop, `the lease end stored when the stop began (${new Date(atStop[0]!).toISOString()}) was not pushed forward after it`).to.deep.equal(atStop);
    await sleep(4_500); // the handler ends; its release fails on the closed client
  });

  it('server.stop() leaves no lock behind that an acquisition in flight at the stop took, once it lands', async function () {
    this.timeout(20_000);
    const seeded = await freshCollection([{ _id: 'a' }]);
    // The acquisition's write lands at once; its reply is slow on the way back: it arrives once
    // server.stop() has resolved (or after 3 s, if the stop waits for it, as it does).
    let stopped!: () => void;
    const stop = new Promise<void>((resolve) => (stopped = resolve));
    const { server, collection } = await applicationServer(seeded, 'plugin registered first', {
      reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? Promise.race([stop, sleep(3_000)]) : 0),
    });
    let handlerRan = false;
    server.route({
      method: 'POST',
      path: '/docs/{id}',
      options: {
        timeout: { server: 100 },
        plugins: { monglock: { lock: writeLock({ collection, locktimeout: 30_000 }), filter: byId } },
        handler: () => {
          handlerRan = true;
          return 'done';
        },
      },
    });
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a`, { method: 'POST' });
    expect(answer.status, 'hapi answered 503 while the acquisition was on its way').to.equal(503);
    await server.stop({ timeout: 1_000 });
    stopped();
    await sleep(1_000); // the acquisition's reply has arrived, and whatever follows it is done
    expect(handlerRan, 'the handler never ran (hapi had answered)').to.equal(false);
    expect(await heldIds(seeded, 'a'), 'the lock the in-flight acquisition took is released, not left for its 30 s lease after the stop').to.deep.equal([]);
  });

  it('server.stop() lets a commitAll whose first write went out finish: both documents updated, not one', async function () {
    this.timeout(20_000);
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    let signal: AbortSignal | undefined;
    let client: ClientRequest | undefined;
    let stopping: Promise<void> | undefined;
    const { server } = await applicationServer(accounts);
    // The first commit write (an updateOne carrying $inc) has landed; before its reply is handed
    // back, the client leaves and the server is stopped. The reply is held until the stop has told
    // the route to wind down (its signal), or 3 s.
    const slow = delayedCollection(accounts, {
      reply: (method, _n, args) => {
        if (method !== 'updateOne' || !('$inc' in (args[1] as object)) || stopping) return undefined;
        client?.destroy();
        stopping = sleep(100).then(() => server.stop({ timeout: 1_000 }));
        return Promise.race([new Promise((resolve) => signal?.addEventListener('abort', resolve)), sleep(3_000)]);
      },
    });
    server.route({
      method: 'GET',
      path: '/pair',
      options: {
        plugins: { monglock: { lock: writeLock({ collection: slow, locktimeout: 10_000 }), filters: () => [{ _id: 1 }, { _id: 2 }] } },
        handler: (request) => {
          signal = lockOf(request).signal;
          return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], 'moved');
        },
      },
    });
    await server.start();
    await new Promise<void>((resolve) => {
      client = httpRequest({ host: '127.0.0.1', port: server.info.port, path: '/pair', method: 'GET' }, (res) => res.resume());
      client.on('error', () => resolve());
      client.on('close', () => resolve());
      client.end();
    });
    await sleep(200);
    expect(stopping, 'the first commit write landed and the stop began').to.not.equal(undefined);
    await stopping;
    await sleep(500);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const what = `documents hold n = ${JSON.stringify(docs.map((doc) => doc.n))}, write entries ${JSON.stringify(docs.map((doc) => doc.lock?.tags?.write?.length))}`;
    expect(docs.map((doc) => doc.n), `the group commit is applied whole or not at all (${what})`).to.satisfy((n: number[]) => n.every((x) => x === n[0]));
  });
});
