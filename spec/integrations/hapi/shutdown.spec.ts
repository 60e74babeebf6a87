/**
 * A graceful `server.stop()` with the usual `onPostStop → client.close()`: the plugin's releases
 * and the route code that still runs under a lock end before the application closes its client,
 * so no document stays locked for the rest of its lease.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { lockOf, monglockPlugin } from '../../../lib/hapi';
import { freshCollection, newClient, sleep } from '../../support/fixture';
import { heldIds } from '../../support/hapi-server';

describe('hapi: graceful shutdown', () => {
  for (const order of ['plugin registered first', "application's onPostStop declared first, after: 'monglock'"] as const) {
    it(`server.stop() waits for route code still running after a 503 and its release before the application's onPostStop closes the client (${order})`, async function () {
      this.timeout(20_000);
      const seeded = await freshCollection([{ _id: 'a' }]);
      const client = await newClient(); // the application's own client, closed on stop
      const lock = writeLock({ collection: client.db(seeded.dbName).collection(seeded.collectionName), locktimeout: 30_000 });
      const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
      const closeClient = (): Promise<void> => client.close();
      if (order === 'plugin registered first') {
        await server.register({ plugin: monglockPlugin });
        server.ext('onPostStop', closeClient);
      } else {
        server.ext('onPostStop', closeClient, { after: 'monglock' });
        await server.register({ plugin: monglockPlugin });
      }
      let sawAbort = false;
      server.route({
        method: 'POST',
        path: '/docs/{id}/slow',
        options: {
          timeout: { server: 100 },
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: async (request) => {
            const { signal } = lockOf(request);
            // Slower than the server timeout: hapi answers 503 while this runs; the stop's abort ends it early.
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 1_500);
              signal.addEventListener('abort', () => {
                sawAbort = true;
                clearTimeout(timer);
                resolve();
              });
            });
            await sleep(200); // what route code does to wind down, still under the lock
            return 'done';
          },
        },
      });
      await server.start();
      const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a/slow`, { method: 'POST' });
      expect(answer.status, 'hapi answered while the handler runs').to.equal(503);
      expect(await heldIds(seeded, 'a'), 'the handler still holds the lock').to.have.length(1);
      await server.stop({ timeout: 1_000 });
      expect(sawAbort, 'the route code still running was told to stop (lockOf(request).signal)').to.equal(true);
      expect(await heldIds(seeded, 'a'), 'released before the client closed, not left for its 30 s lease').to.deep.equal([]);
    });
  }
});
