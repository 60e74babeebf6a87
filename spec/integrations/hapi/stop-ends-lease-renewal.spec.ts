/**
 * docs/hapi.md, "Stopping the server": for route code that ignores its signal, `server.stop()`
 * waits until the lease has ended, and the lock "is no longer extended" from the stop on. So the
 * lease the stop waited for is the last: no extension is written after the stop began.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { monglockPlugin } from '../../../lib/hapi';
import { freshCollection, newClient, sleep } from '../../support/fixture';

describe('hapi: stopping the server while route code ignores its signal', () => {
  it('no extension of the lock is written once server.stop() began: the lease the stop waits for is its last', async function () {
    this.timeout(20_000);
    const seeded = await freshCollection([{ _id: 'a' }]);
    const client = await newClient(); // the application's own client, closed on stop
    const lock = writeLock({ collection: client.db(seeded.dbName).collection(seeded.collectionName), locktimeout: 2_000 });
    const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
    await server.register({ plugin: monglockPlugin });
    server.ext('onPostStop', () => client.close());
    server.route({
      method: 'POST',
      path: '/docs/{id}/slow',
      options: {
        timeout: { server: 100 },
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
        handler: async () => {
          await sleep(4_000); // ignores its signal
          return 'done';
        },
      },
    });
    await server.start();
    const answer = await fetch(`http://127.0.0.1:${server.info.port}/docs/a/slow`, { method: 'POST' });
    expect(answer.status, 'hapi answered while the handler runs').to.equal(503);
    const expiryOf = async (): Promise<number[]> => ((await seeded.findOne({ _id: 'a' as never }))?.lock?.tags?.write ?? []).map((entry: { exp: Date }) => entry.exp.getTime());
    const atStop = await expiryOf();
    expect(atStop, 'held by the handler when the stop begins').to.have.length(1);
    await server.stop({ timeout: 1_000 });
    const afterStop = await expiryOf();
    expect(afterStop, `the lease end stored when the stop began (${new Date(atStop[0]!).toISOString()}) was not pushed forward after it`).to.deep.equal(atStop);
    await sleep(4_500); // the handler ends; its release fails on the closed client
  });
});
