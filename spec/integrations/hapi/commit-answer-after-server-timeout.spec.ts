/**
 * docs/hapi.md: "a 503 always means that nothing was written". A handler's commit that was applied
 * before hapi's server timeout fired, while the route's onPostHandler extension (or its response
 * validation) still ran, must be answered with its value: a 503 for it tells the client to retry a
 * write that landed, and the retry applies it twice.
 */
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: a commit applied before the server timeout, answered after it', () => {
  afterEach(stopServers);

  it('a commit applied before hapi\'s server timeout fired (while an onPostHandler extension ran) is not answered 503', async function () {
    this.timeout(15_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          timeout: { server: 200 },
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          // An audit step after the handler, slower than what is left of the server timeout.
          ext: { onPostHandler: { method: async (_request, h) => (await sleep(600), h.continue) } },
          handler: () => commit({ $inc: { balance: -30 } }, { debited: 30 }),
        },
      }),
    );
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/accounts/a/debit`, { method: 'POST' });
    const body = await answer.text();
    const stored = await accounts.findOne({ _id: 'a' as never });
    const what = `answered ${answer.status} ${body}; stored balance ${String(stored?.balance)}`;
    expect(stored?.balance, `the commit was applied before the timeout (${what})`).to.equal(70);
    expect(answer.status, `the client is told what was applied, not 503 (so it would retry and debit twice) (${what})`).to.equal(200);
  });
});
