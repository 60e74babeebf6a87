/**
 * docs/hapi.md: "a 503 always means that nothing was written". hapi's server timeout can fire
 * after the handler returned its commit, while the route's onPostHandler extension (or its
 * response validation) still runs: the answer is then a 503, so the commit must not be applied (a
 * client that retries would apply it twice). The commit is applied only once the answer is
 * settled and is no failure.
 */
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, released, stopServers } from '../../support/hapi-server';

describe('hapi: a commit whose answer became a 503 after the handler', () => {
  afterEach(stopServers);

  it('a commit returned before hapi\'s server timeout fired (an onPostHandler extension still ran) is not applied when the answer is 503', async function () {
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
    expect({ status: answer.status, balance: stored?.balance }, `a 503 and nothing written, so the client's retry debits once (${what})`).to.deep.equal({ status: 503, balance: 100 });
    await released(accounts, 'a'); // once the onPostHandler extension has ended (it runs under the lock)
    expect((await accounts.findOne({ _id: 'a' as never }))?.balance, `released without the update (${what})`).to.equal(100);
  });
});
