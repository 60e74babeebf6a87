/**
 * hapi's server timeout while a route waits for its lock: the client gets hapi's 503, the wait
 * ends (no lock is kept, no route code runs), and hapi's own answer stays the request's response
 * for what reads it at the server's `response` event (loggers read `request.response.statusCode`):
 * not a 500 of the wait's end, nor a boom set over the Response hapi was sending.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
import { isAcquisition } from '../../support/lock-commands';
import { makeServer, released, stopServers } from '../../support/hapi-server';

describe('hapi: a server timeout while the route waits for its lock', () => {
  afterEach(stopServers);

  it("the client gets hapi's 503; the server's response event sees hapi's own 503 Response (not a 500, not a boom without statusCode); no route code runs; nothing is held", async () => {
    const collection = await freshCollection([{ _id: 'w' }]);
    // The route's acquisition reaches the server 300 ms late, past the route's 100 ms server timeout.
    const lock = writeLock({ collection: delayedCollection(collection, { request: (method, _n, args) => (isAcquisition(method, args) ? 300 : 0) }) });
    let ran = 0;
    const server = await makeServer((s) =>
      s.route({ method: 'POST', path: '/w/{id}', options: { timeout: { server: 100 }, plugins: { monglock: { lock, filter: (request) => ({ _id: request.params.id }) } }, handler: () => (ran++, 'done') } }),
    );
    const seen = new Promise<{ isBoom: unknown; statusCode: unknown; output: unknown }>((resolve) =>
      server.events.on('response', (request: Hapi.Request) => {
        const response = request.response as unknown as { isBoom?: unknown; statusCode?: unknown; output?: { statusCode?: unknown } };
        resolve({ isBoom: response.isBoom === true, statusCode: response.statusCode, output: response.output?.statusCode });
      }),
    );
    const res = await server.inject({ method: 'POST', url: '/w/w' });
    expect(res.statusCode).to.equal(503);
    expect(JSON.parse(res.payload), 'the body the client got').to.deep.include({ statusCode: 503, error: 'Service Unavailable' });
    // As hapi leaves it without monglock: the Response it sent (statusCode 503). Before: a 500 of the
    // wait's end (output 500), then hapi's 503 boom set over that Response (no statusCode).
    expect(await seen, "request.response at the server's response event").to.deep.equal({ isBoom: false, statusCode: 503, output: undefined });
    await sleep(600); // the acquisition has landed (300 ms late)
    await released(collection, 'w'); // the abandoned acquisition's lock, released once its reply came
    expect(ran, 'route code that ran').to.equal(0);
  });
});
