/**
 * `server.stop()` while a request's acquisition is on its way: the plugin's onPostStop must not
 * resolve (letting the application close its client) before that acquisition has settled and
 * whatever lock it took is released, else the document stays locked for its whole lease.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { monglockPlugin } from '../../../lib/hapi';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../../support/fixture';
import { heldIds } from '../../support/hapi-server';

describe('hapi: stopping while a request acquires its lock', () => {
  it('server.stop() leaves no lock behind that an acquisition in flight at the stop took, once it lands', async function () {
    this.timeout(20_000);
    const seeded = await freshCollection([{ _id: 'a' }]);
    const client = await newClient(); // the application's own client, closed on stop
    const collection = client.db(seeded.dbName).collection(seeded.collectionName);
    // The acquisition's write lands at once; its reply is slow on the way back: it arrives once
    // server.stop() has resolved (or after 8 s, if the stop waits for it).
    let stopped!: () => void;
    const stop = new Promise<void>((resolve) => (stopped = resolve));
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 1 ? Promise.race([stop, sleep(8_000)]) : 0) });
    const lock = writeLock({ collection: slow, locktimeout: 30_000 });
    const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
    await server.register({ plugin: monglockPlugin });
    server.ext('onPostStop', () => client.close()); // after the plugin's, as docs/hapi.md says
    let handlerRan = false;
    server.route({
      method: 'POST',
      path: '/docs/{id}',
      options: {
        timeout: { server: 100 },
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
        handler: () => {
          handlerRan = true;
          return 'done';
        },
      },
    });
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a`, { method: 'POST' });
    expect(answer.status, 'hapi answered 503 while the acquisition was on its way').to.equal(503);
    await server.stop({ timeout: 1_000 });
    stopped();
    await sleep(1_000); // the acquisition's reply has arrived, and whatever follows it is done
    expect(handlerRan, 'the handler never ran (hapi had answered)').to.equal(false);
    expect(await heldIds(seeded, 'a'), 'the lock the in-flight acquisition took is released, not left for its 30 s lease after the stop').to.deep.equal([]);
  });
});
