/**
 * `server.stop()` while a `filters` route's commitAll is on its way (its client gone): a group
 * commit whose first write went out is finished, as it is when hapi's server timeout fires
 * meanwhile; the stop must not cut it in the middle, leaving one document updated and the other
 * not.
 */
import { request as httpRequest, type ClientRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commitAll, writeLock } from '../../../lib';
import { lockOf, monglockPlugin } from '../../../lib/hapi';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';

describe('hapi `filters` route: stopping the server during its commitAll', () => {
  it('server.stop() lets a commitAll whose first write went out finish: both documents updated, not one', async function () {
    this.timeout(20_000);
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    let signal: AbortSignal | undefined;
    let client: ClientRequest | undefined;
    let stopping: Promise<void> | undefined;
    const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
    // The first commit write (an updateOne carrying $inc) has landed; before its reply is handed
    // back, the client leaves and the server is stopped. The reply is held until the stop has told
    // the route to wind down (its signal), or 3 s.
    const slow = delayedCollection(accounts, {
      reply: (method, _n, args) => {
        if (method !== 'updateOne' || !('$inc' in (args[1] as object)) || stopping) return undefined;
        client?.destroy();
        stopping = sleep(100).then(() => server.stop({ timeout: 1_000 }));
        return Promise.race([new Promise((resolve) => signal?.addEventListener('abort', resolve)), sleep(3_000)]);
      },
    });
    const lock = writeLock({ collection: slow, locktimeout: 10_000 });
    await server.register({ plugin: monglockPlugin });
    server.route({
      method: 'GET',
      path: '/pair',
      options: {
        plugins: { monglock: { lock, filters: () => [{ _id: 1 }, { _id: 2 }] } },
        handler: (request) => {
          signal = lockOf(request).signal;
          return commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], 'moved');
        },
      },
    });
    await server.start();
    await new Promise<void>((resolve) => {
      client = httpRequest({ host: '127.0.0.1', port: server.info.port, path: '/pair', method: 'GET' }, (res) => res.resume());
      client.on('error', () => resolve());
      client.on('close', () => resolve());
      client.end();
    });
    await sleep(200);
    expect(stopping, 'the first commit write landed and the stop began').to.not.equal(undefined);
    await stopping;
    await sleep(500);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const what = `documents hold n = ${JSON.stringify(docs.map((doc) => doc.n))}, write entries ${JSON.stringify(docs.map((doc) => doc.lock?.tags?.write?.length))}`;
    expect(docs.map((doc) => doc.n), `the group commit is applied whole or not at all (${what})`).to.satisfy((n: number[]) => n.every((x) => x === n[0]));
  });
});
