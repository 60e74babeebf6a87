/**
 * Review 3: the hapi route option `document`.
 *
 * - resolveRoute (lib/hapi.ts) validates it with `expectDocumentOption(..., 'lock')`: the default
 *   field name, not the route's lock's `field`. A route whose lock keeps its lock in `mutex` and
 *   excludes it (`document: { mutex: 0 }`) passes server.initialize() (which is there so that "a
 *   misconfigured route fails server.initialize()/start(), not its first request") and then
 *   answers 500 to every request.
 * - a projection without `_id` (`document: { _id: 0, balance: 1 }`) is accepted, and every
 *   request's lock is then addressed by `{ _id: undefined }`: the plugin's release after the
 *   response fails (logged) and the lock stays held until its lease ends, so the next request
 *   for the same document is refused (409).
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../lib';
import { monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

describe('review 3 (fixed): the hapi route option document', () => {
  it('excluding the lock\'s own field (not named lock) fails server.initialize(), not every request', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 1 }]);
    const server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    server.route({
      method: 'POST',
      path: '/accounts/{id}',
      options: {
        plugins: { monglock: { lock: writeLock({ collection, field: 'mutex' }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: { mutex: 0 } } },
        handler: () => 'ok',
      },
    });
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
    const server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    server.route({
      method: 'GET',
      path: '/accounts/{id}',
      options: {
        plugins: { monglock: { lock: writeLock({ collection, locktimeout: 10_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: { _id: 0, balance: 1 } } },
        handler: (request) => ((request.plugins.monglock as unknown as { document: { balance: number } }).document.balance),
      },
    });
    await server.initialize();
    const first = await server.inject({ method: 'GET', url: '/accounts/a' });
    await sleep(100); // the plugin releases after the response
    const second = await server.inject({ method: 'GET', url: '/accounts/a' });
    expect([first.statusCode, second.statusCode]).to.deep.equal([200, 200]);
  });
});
