/**
 * Found by review of 6cab1b9 (fixed in ceca4ec): the hapi plugin holds its lock "until the response is out and none of the
 * route's pre methods/failActions/handler runs" (README: "the handler still finishes under its
 * lock"), but nothing keeps the lease alive meanwhile (using() has a lease keeper; the plugin
 * does not). A handler that runs longer than the lease runs next to another request's handler.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../lib';
import { monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

describe('review 1: hapi hold route whose handler outlives the lease', () => {
  let server: Hapi.Server | undefined;
  afterEach(async () => {
    await server?.stop({ timeout: 1_000 });
  });

  it('the lease is kept alive: never two handlers of one locked document at the same time', async function () {
    this.timeout(10_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const orders = writeLock({ collection, locktimeout: 500 });
    let running = 0;
    let most = 0;
    server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    server.route({
      method: 'POST',
      path: '/orders/{id}/pay',
      options: {
        plugins: { monglock: { lock: orders, filter: (request: Hapi.Request): Document => ({ _id: request.params.id }), wait: 3_000 } },
        handler: async () => {
          running++;
          most = Math.max(most, running);
          await sleep(1_200); // a slow payment provider
          running--;
          return 'paid';
        },
      },
    });
    const first = server.inject({ method: 'POST', url: '/orders/a/pay' });
    await sleep(100);
    const second = server.inject({ method: 'POST', url: '/orders/a/pay' });
    const codes = [(await first).statusCode, (await second).statusCode];
    expect({ codes, most }, 'one handler at a time on one document').to.deep.equal({ codes: [200, 200], most: 1 });
  });
});
