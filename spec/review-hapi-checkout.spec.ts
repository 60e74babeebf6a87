/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): a `mode: 'checkout'` route keeps its lock after the response, for the client
 * to release later with the JSON the handler returns. When that JSON never reaches the client
 * (the client disconnected while the request waited for the lock; the handler failed), nobody
 * can release it: the document stays locked until the lease ends.
 */
import { request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../lib';
import { lockOf, monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

const servers: Hapi.Server[] = [];

async function makeServer(setup: (server: Hapi.Server) => void): Promise<Hapi.Server> {
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  await server.register({ plugin: monglockPlugin });
  setup(server);
  servers.push(server);
  return server;
}

async function heldIds(collection: Collection<Document>, id: unknown): Promise<string[]> {
  const doc = await collection.findOne({ _id: id as never });
  return ((doc?.lock?.tags?.write ?? []) as Array<{ id: string; exp: Date }>).filter((e) => e.exp.getTime() > Date.now()).map((e) => e.id);
}

function send(port: number, method: string, path: string, abortAfter?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => (abortAfter !== undefined ? resolve(0) : reject(error)));
    if (abortAfter !== undefined) setTimeout(() => req.destroy(), abortAfter);
    req.end();
  });
}

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

describe('review 1: hapi checkout routes whose lock never reaches the client', () => {
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop({ timeout: 1_000 })));
  });

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
});
