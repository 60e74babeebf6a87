/**
 * docs/hapi.md, "What the plugin guarantees": `onPostHandler` extensions (and response validation)
 * still run under the lock, before it is released; the release comes before the answer "(a
 * write, a `commit`, …) alike". So while a locked route's onPostHandler runs, nobody else can take
 * its lock, whether the handler returned a value or `commit(update, value)`.
 */
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: onPostHandler extensions of a locked route', () => {
  afterEach(stopServers);

  for (const returns of ['a value', 'commit(update, value)'] as const) {
    it(`run under the route's lock when the handler returns ${returns}: another caller cannot take it meanwhile`, async () => {
      const orders = await freshCollection([{ _id: 'o', status: 'open' }]);
      const lock = writeLock({ collection: orders, locktimeout: 5_000 });
      let takenMeanwhile: string | undefined;
      const server = await makeServer((s) =>
        s.route({
          method: 'POST',
          path: '/orders/{id}/pay',
          options: {
            plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
            ext: {
              onPostHandler: {
                method: async (request, h) => {
                  // Another caller tries the route's lock while the extension runs.
                  const other = await lock.acquire({ _id: request.params.id }).catch(() => undefined);
                  if (other) {
                    takenMeanwhile = other.id;
                    await other.release();
                  }
                  return h.continue;
                },
              },
            },
            handler: () => (returns === 'a value' ? { paid: true } : commit({ $set: { status: 'paid' } }, { paid: true })),
          },
        }),
      );
      const response = await server.inject({ method: 'POST', url: '/orders/o/pay' });
      expect(response.statusCode, `the route answered (${response.payload})`).to.equal(200);
      expect(takenMeanwhile, `another caller took the lock (${String(takenMeanwhile)}) while the route's onPostHandler ran`).to.equal(undefined);
    });
  }
});
