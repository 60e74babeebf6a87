/**
 * A handler returns `commit(update, value)` before hapi's server timeout, and the commit's write is
 * on its way to the server (a slow network) when the timeout answers 503. docs/hapi.md: "a
 * handler's `commit` is not applied once hapi has answered", and a commit answers `value` once
 * the update is applied: the client that gets 503 retries, so the update must not land behind it.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { makeServer, released, stopServers } from '../../support/hapi-server';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('hapi: a commit whose write is in flight when the server timeout answers', () => {
  afterEach(stopServers);

  it('the answer says what was applied: 503 and nothing written, or the value and the update', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'a', balance: 100 }]);
    let answered!: () => void;
    const answer = new Promise<void>((resolve) => (answered = resolve));
    const slow = delayedCollection(collection, {
      // Every write after the acquisition (the commit) reaches the server once the client has its answer (or after 3 s).
      request: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? undefined : Promise.race([answer, sleep(3_000)])),
    });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          timeout: { server: 500 },
          plugins: { monglock: { lock: writeLock({ collection: slow, locktimeout: 10_000 }), filter: (request: Hapi.Request) => ({ _id: request.params.id }), document: true } },
          handler: async (request) => {
            const { document } = request.plugins.monglock as unknown as { document: { balance: number } };
            await sleep(100);
            return commit({ $set: { balance: document.balance - 30 } }, { balance: document.balance - 30 });
          },
        },
      }),
    );
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    answered();
    await released(collection, 'a', 5_000);
    const balance = (await collection.findOne({ _id: 'a' as never }))?.balance as number;
    const consistent = (response.statusCode === 503 && balance === 100) || (response.statusCode === 200 && balance === 70);
    expect(consistent, `answered ${response.statusCode} ${response.payload}, and the balance is ${balance}`).to.equal(true);
  });
});
