/**
 * docs/hapi.md: "`onPostHandler` extensions, response validation and the `onPreResponse`
 * extensions that run before monglock's still run under the lock", and after hapi's server timeout
 * (503) "the lock is kept until the last of its pre methods and its handler finishes, so ... route
 * code never starts without the lock". A route's own onPostHandler extension that is still running
 * when hapi's server timer fires is route code too: nobody else may take the lock meanwhile.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: an onPostHandler extension still running when hapi answers 503', () => {
  afterEach(stopServers);

  it("keeps the route's lock until it ends: another caller cannot take it meanwhile", async function () {
      this.timeout(10_000);
      const orders = await freshCollection([{ _id: 'o', status: 'open' }]);
      const lock = writeLock({ collection: orders, locktimeout: 5_000 });
      const other = writeLock({ collection: orders, locktimeout: 5_000 }); // another client
      let takenMeanwhile: string | undefined;
      let extensionEnded = false;
      let endExtension!: () => void;
      const extensionMayEnd = new Promise<void>((resolve) => (endExtension = resolve));
      const server = await makeServer((s) =>
        s.route({
          method: 'POST',
          path: '/orders/{id}/pay',
          options: {
            timeout: { server: 200 },
            plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
            ext: {
              onPostHandler: {
                method: async (_request, h) => {
                  await extensionMayEnd; // outlives hapi's server timeout
                  extensionEnded = true;
                  return h.continue;
                },
              },
            },
            handler: () => ({ paid: true }),
          },
        }),
      );
      const response = await server.inject({ method: 'POST', url: '/orders/o/pay' });
      expect(response.statusCode, `hapi's server timeout answered (${response.payload})`).to.equal(503);
      await sleep(100);
      const taken = await other.acquire({ _id: 'o' }).catch(() => undefined);
      if (taken && !extensionEnded) takenMeanwhile = taken.id;
      endExtension();
      await taken?.release().catch(() => undefined);
      expect(takenMeanwhile, `another caller took the route's lock (${String(takenMeanwhile)}) while its onPostHandler extension still ran`).to.equal(undefined);
    });
});
