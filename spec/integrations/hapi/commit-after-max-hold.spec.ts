/**
 * docs/hapi.md: a handler's `commit` "answers `value` once the update and the release are applied
 * together", and "a commit that cannot be applied (the lease was lost) is answered with its error
 * instead of the value". A handler that outlives its route's `maxHold` (the keeper let the lock go
 * while it ran) and then returns `commit(update, value)` cannot have its commit applied: the
 * client must not be told it was.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: a commit returned after maxHold released the lock', () => {
  afterEach(stopServers);

  it('is never answered with its value while nothing was written: the answer is a failure, or the update landed', async function () {
    this.timeout(10_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), maxHold: 200 } },
          handler: async () => {
            await sleep(800); // ignores its signal: maxHold releases the lock meanwhile
            return commit({ $inc: { balance: -30 } }, { debited: 30 });
          },
        },
      }),
    );
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    const account = await accounts.findOne({ _id: 'a' as never });
    const applied = account?.balance === 70;
    if (!applied) {
      expect(response.statusCode, `answered ${response.statusCode} ${response.payload} although the commit was not applied (balance ${String(account?.balance)})`).to.be.at.least(400);
    } else {
      expect(response.statusCode, `the update was applied but the answer is ${response.statusCode}`).to.equal(200);
    }
  });
});
