/**
 * Review 4: a hapi route whose `maxHold` passes while a pre method still runs. The keeper
 * (lease-keeper.ts `giveUp`) releases the lock itself, but the plugin's request state is not told
 * (hapi-lifecycle.ts: `state.released` stays false), so the wrapped handler is still started
 * after the release. README (hapi): "Once the lock is released, the plugin refuses to start any
 * of them ... so route code never runs without the lock." Here another client takes the lock as
 * soon as maxHold released it, and the route's handler then runs while that client holds it: two
 * holders of one document lock.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { isLockError, writeLock, type LockHandle } from '../lib';
import { monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

describe('review 4: hapi maxHold releases the lock but route code still starts', () => {
  it('no pre method or handler starts after maxHold released the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'o' }]);
    const lock = writeLock({ collection, locktimeout: 2_000 });
    const other = writeLock({ collection, locktimeout: 5_000 }); // another client
    const server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    const otherClient: { held?: LockHandle } = {};
    let preStarted!: () => void;
    const routeHoldsTheLock = new Promise<void>((resolve) => (preStarted = resolve));
    let handlerRanWhileOtherHeld = false;
    server.route({
      method: 'POST',
      path: '/o/{id}',
      options: {
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), maxHold: 300 } },
        pre: [
          {
            method: async () => {
              preStarted();
              await sleep(800); // a slow pre method: maxHold (300 ms) passes meanwhile
              return 'pre done';
            },
            assign: 'slow',
          },
        ],
        handler: async () => {
          // Is another client holding "our" lock while the handler runs?
          handlerRanWhileOtherHeld = otherClient.held !== undefined && isLockError(await other.acquire({ _id: 'o' }).catch((error: unknown) => error), 'LockAlreadyTaken');
          return 'handler ran';
        },
      },
    });
    await server.initialize();
    const responding = server.inject({ method: 'POST', url: '/o/o' });
    await routeHoldsTheLock; // the route acquired the lock; its pre method runs
    // Another client waits for the document and gets it once maxHold released it.
    otherClient.held = await other.acquire({ _id: 'o' }, { wait: 5_000 });
    const response = await responding;
    await sleep(200);
    console.log(`      other client got the lock; route answered ${response.statusCode} ${String(response.result)}`);
    expect(handlerRanWhileOtherHeld, 'the handler ran while another client held the lock').to.equal(false);
    expect(response.result).to.not.equal('handler ran');
    await otherClient.held.release();
    await server.stop();
  });
});
