/**
 * `server.stop()` while a request waits for its lock (a route with `wait`, the document held
 * elsewhere): the wait ends as the stop begins (onPreStop) and the client is answered 503, so the
 * stop does not sit out hapi's stop timeout with a connection it then drops unanswered. A wait
 * that would start while the server stops is refused 503 at once.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock, type LockHandle } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });
/** hapi's default stop timeout: a stop that waits for the waiting request takes all of it. */
const HAPI_STOP_TIMEOUT = 5_000;
/** Well below hapi's stop timeout, and generous on a loaded 2-core machine. */
const STOP_BOUND = 3_000;

/** Resolves with the status of `path`'s POST, or the error that ended it (a dropped connection). */
async function statusOf(port: number, path: string): Promise<number | string> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST' });
    await response.arrayBuffer();
    return response.status;
  } catch (error) {
    return `no answer: ${String((error as { cause?: unknown }).cause ?? error)}`;
  }
}

/** Sends `POST /docs/w`, stops the server once `reached` resolves (with hapi's default timeout): the client's answer and how long the stop took. */
async function stoppedDuring(server: Hapi.Server, reached: Promise<void>): Promise<{ status: number | string; stopMs: number }> {
  const answer = statusOf(server.info.port as number, '/docs/w');
  await reached;
  const began = Date.now();
  await server.stop({ timeout: HAPI_STOP_TIMEOUT });
  const stopMs = Date.now() - began;
  return { status: await answer, stopMs };
}

/**
 * Document `w`, held elsewhere, and a server whose route `POST /docs/{id}` waits up to 10 s for
 * it: `attempted` resolves once the route's first acquisition attempt has its reply (refused: the
 * request then waits).
 */
async function heldElsewhere(): Promise<{ seeded: Collection<Document>; attempted: Promise<void>; holder: LockHandle; server: Hapi.Server }> {
  const seeded = await freshCollection([{ _id: 'w' }]);
  let firstAttempt!: () => void;
  const attempted = new Promise<void>((resolve) => (firstAttempt = resolve));
  const collection = delayedCollection(seeded, { reply: (method) => (method === 'findOneAndUpdate' ? void firstAttempt() : undefined) });
  const holder = await writeLock({ collection: seeded, locktimeout: 30_000 }).acquire({ _id: 'w' });
  const server = await makeServer((s) =>
    s.route({ method: 'POST', path: '/docs/{id}', options: { plugins: { monglock: { lock: writeLock({ collection, locktimeout: 10_000 }), filter: byId, wait: 10_000 } }, handler: () => 'done' } }),
  );
  return { seeded, attempted, holder, server };
}

describe('hapi: server.stop() with a request waiting for its lock', () => {
  afterEach(stopServers);

  it('a request waiting for its lock when the stop begins is answered 503, and the stop resolves well before hapi would drop the connection', async function () {
    this.timeout(30_000);
    const { seeded, attempted, holder, server } = await heldElsewhere();
    await server.start();
    const { status, stopMs } = await stoppedDuring(server, attempted);
    expect({ status, stoppedWellBeforeHapisTimeout: stopMs < STOP_BOUND }, `the waiting client's answer, and the stop took ${stopMs} ms`).to.deep.equal({ status: 503, stoppedWellBeforeHapisTimeout: true });
    expect(await heldIds(seeded, 'w'), 'the other holder still holds the document').to.deep.equal([holder.id]);
    await holder.release();
    await server.start(); // started again: its requests wait for their lock as before
    expect(await statusOf(server.info.port as number, '/docs/w'), 'a request once the server started again, the document free').to.equal(200);
  });

  it('through server.inject (no connection for hapi to wait for): the waiting request is answered 503 as the stop begins, not after its wait', async function () {
    this.timeout(30_000);
    const { attempted, holder, server } = await heldElsewhere();
    await server.initialize();
    const began = Date.now();
    const answer = server.inject({ method: 'POST', url: '/docs/w' });
    await attempted;
    await server.stop({ timeout: HAPI_STOP_TIMEOUT });
    const status = (await answer).statusCode;
    const answeredMs = Date.now() - began;
    expect({ status, answeredBeforeItsWait: answeredMs < STOP_BOUND }, `the injected request's answer, after ${answeredMs} ms`).to.deep.equal({ status: 503, answeredBeforeItsWait: true });
    await holder.release();
  });

  it('a request that reaches its wait while the server stops is answered 503 at once, not after its wait', async function () {
    this.timeout(30_000);
    const seeded = await freshCollection([{ _id: 'w' }]);
    const holder = await writeLock({ collection: seeded, locktimeout: 30_000 }).acquire({ _id: 'w' });
    let arrived!: () => void;
    const inRoute = new Promise<void>((resolve) => (arrived = resolve));
    let stopBegan!: () => void;
    const stopping = new Promise<void>((resolve) => (stopBegan = resolve));
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/docs/{id}',
        options: {
          // Before monglock's onPreHandler: the request reaches its wait only once the stop began.
          ext: { onPreAuth: { method: async (_request, h) => (arrived(), await stopping, h.continue) } },
          plugins: { monglock: { lock: writeLock({ collection: seeded, locktimeout: 10_000 }), filter: byId, wait: 10_000 } },
          handler: () => 'never',
        },
      });
      s.ext('onPreStop', () => stopBegan()); // after monglock's
    });
    await server.start();
    const { status, stopMs } = await stoppedDuring(server, inRoute);
    expect({ status, stoppedWellBeforeHapisTimeout: stopMs < STOP_BOUND }, `the client's answer, and the stop took ${stopMs} ms`).to.deep.equal({ status: 503, stoppedWellBeforeHapisTimeout: true });
    await holder.release();
  });
});
