/**
 * A locked route's commit is answered by what was applied. hapi checks the answer after the handler
 * (response validation, `options.response.schema`) and fails it with a 500 when it does not pass;
 * for a handler that returned `commit(update, value)`, the update is applied by then, so the client
 * is told "failed" for a write that landed (and may retry it). As with a value that cannot be sent
 * as JSON (refused before anything is written), a client must never get a failure for an applied
 * commit.
 */
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: a commit whose value fails the route\'s response validation', () => {
  afterEach(stopServers);

  it('the answer does not say failed (500) while the update was applied', async () => {
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/accounts/{id}/debit',
        options: {
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          // The answer must be { balance: number }; this handler answers a string balance.
          response: {
            schema: (value: unknown) => {
              if (typeof (value as { balance?: unknown } | null)?.balance !== 'number') throw new Error('balance must be a number');
              return value;
            },
          },
          handler: () => commit({ $inc: { balance: -30 } }, { balance: '70' }),
        },
      }),
    );
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    const stored = await accounts.findOne({ _id: 'a' as never });
    const applied = stored?.balance === 70;
    const what = `answered ${response.statusCode} ${response.payload}; stored balance ${String(stored?.balance)}`;
    expect(applied && response.statusCode >= 500, `a failure answered for an applied commit (${what})`).to.equal(false);
  });
});
