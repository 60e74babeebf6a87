/**
 * docs/hapi.md: "If a plugin registered before monglock answers from its own `onPreResponse`
 * extension with a takeover or an error, hapi skips monglock's: the lock is then released once the
 * response has gone out". A handler's commit is applied in monglock's onPreResponse; when hapi
 * skips it, the client must not be answered a success for a commit that was never applied (a
 * common takeover: an envelope plugin that wraps every success in `{ data }`).
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { monglockPlugin } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { released } from '../../support/hapi-server';

describe('hapi: a commit when a plugin registered before monglock takes over in onPreResponse', () => {
  let server: Hapi.Server | undefined;
  afterEach(async () => server?.stop());

  it('a success answer means the update was applied', async () => {
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    server = Hapi.server({ debug: false });
    await server.register({
      name: 'envelope',
      register(s: Hapi.Server) {
        s.ext('onPreResponse', (request, h) => {
          const response = request.response as { isBoom?: boolean; source?: unknown; statusCode?: number };
          if (response.isBoom) return h.continue;
          return h.response({ data: response.source }).code(response.statusCode ?? 200).takeover();
        });
      },
    });
    await server.register({ plugin: monglockPlugin });
    server.route({
      method: 'POST',
      path: '/accounts/{id}/debit',
      options: {
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
        handler: () => commit({ $inc: { balance: -30 } }, { debited: 30 }),
      },
    });
    await server.initialize();
    const response = await server.inject({ method: 'POST', url: '/accounts/a/debit' });
    await released(accounts, 'a');
    const account = await accounts.findOne({ _id: 'a' as never });
    if (response.statusCode < 400) {
      expect(account?.balance, `answered ${response.statusCode} ${response.payload}, but the commit was not applied`).to.equal(70);
    } else {
      expect(account?.balance, `answered ${response.statusCode} ${response.payload}, but the commit was applied`).to.equal(100);
    }
  });
});
