/**
 * Review 3: a hapi handler that returns `commit(update, value)` after hapi already answered the
 * request (a server timeout: 503) still has its update applied (hapi-lifecycle.ts `commitFor`
 * does not look at `state.responded`). README: the handler "answers `value` once the update and
 * the release are applied together". Here the client was told the request failed, and the
 * write was made anyway: a client that retries a 503 applies it twice. The plugin already aborts
 * a wait for the lock once the answer went out; the commit, applied by the plugin itself, could be
 * refused the same way (and the lock released without it).
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../lib';
import { monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

describe('review 3 (fixed): a hapi commit after the response went out', () => {
  it('a handler that commits after a server timeout (503) writes nothing', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    const server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    server.route({
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
    });
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    await sleep(500); // the handler finishes
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance;
    console.log(`      the client got ${response.statusCode}; balance ${balance}`);
    expect({ status: response.statusCode, balance }).to.deep.equal({ status: 503, balance: 100 });
  });
});
