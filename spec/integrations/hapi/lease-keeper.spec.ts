/**
 * The hapi plugin keeps the lease of a route's lock alive while the route runs, as using() does,
 * and once its keeper let the lock go (maxHold), no more route code starts.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { isLockError, writeLock, type LockHandle } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { realNow } from '../../support/clock';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

/*
 * The plugin holds its lock until the response is out and none of the route's pre
 * methods/failActions/handler runs (README: "the handler still finishes under its lock"), and keeps
 * the lease alive meanwhile, as using() does. The defect guarded against: the plugin had no lease
 * keeper, so a handler that ran longer than the lease ran next to another request's handler.
 */
describe('hapi hold route whose handler outlives the lease', () => {
  afterEach(stopServers);

  it('the lease is kept alive: never two handlers of one locked document at the same time', async function () {
    this.timeout(10_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const orders = writeLock({ collection, locktimeout: 500 });
    let running = 0;
    let most = 0;
    const server = await makeServer((s) =>
      s.route({
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
      }),
    );
    const first = server.inject({ method: 'POST', url: '/orders/a/pay' });
    await sleep(100);
    const second = server.inject({ method: 'POST', url: '/orders/a/pay' });
    const codes = [(await first).statusCode, (await second).statusCode];
    expect({ codes, most }, 'one handler at a time on one document').to.deep.equal({ codes: [200, 200], most: 1 });
  });
});

/*
 * The plugin's lease keeper replans whenever the handle's expiry changes, as using()'s does. The
 * defect guarded against: it did not watch the handle, so a handler that extended its own lock
 * (`lockOf(request).lock.extend()`, which defaults to the lock's own lease, not the route's
 * `locktimeout`) shortened the server's lease under the keeper's plan: `lockOf(request).signal`
 * stayed un-aborted while another request acquired the lock and ran its handler. (The same
 * scenario for using() is in spec/locks/lease.spec.ts.)
 */
describe('hapi handler that extends its own lock', () => {
  afterEach(stopServers);

  it('route locktimeout 4000, lock default 1000, handler calls lock.extend(): the keeper replans, no second handler while the first one\'s signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const orders = writeLock({ collection, locktimeout: 1_000 });
    let firstAbortedAt = 0;
    let secondStartedAt = 0;
    let firstEndedAt = 0;
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/orders/{id}/pay',
        options: {
          plugins: { monglock: { lock: orders, filter: (request: Hapi.Request): Document => ({ _id: request.params.id }), wait: 5_000, locktimeout: 4_000 } },
          handler: async (request) => {
            const { lock, signal } = lockOf(request);
            if (request.query.first === undefined) {
              secondStartedAt = realNow();
              return 'second';
            }
            signal.addEventListener('abort', () => (firstAbortedAt = realNow()), { once: true });
            await lock.extend(); // "a full lease before the slow step"
            // the slow step: runs until the signal says the lock is lost (or 3 s)
            await new Promise<void>((resolve) => {
              signal.addEventListener('abort', () => resolve(), { once: true });
              setTimeout(resolve, 3_000);
            });
            firstEndedAt = realNow();
            return 'first';
          },
        },
      }),
    );
    const first = server.inject({ method: 'POST', url: '/orders/a/pay?first' });
    await sleep(100);
    const second = server.inject({ method: 'POST', url: '/orders/a/pay' });
    const codes = [(await first).statusCode, (await second).statusCode];
    expect(codes).to.deep.equal([200, 200]);
    // Either the first handler had ended before the second started, or its signal had told it to stop.
    const stoppedAt = firstAbortedAt > 0 ? Math.min(firstAbortedAt, firstEndedAt) : firstEndedAt;
    expect(
      stoppedAt,
      `second handler started at ${Math.round(secondStartedAt)}; first handler: signal aborted ${firstAbortedAt ? Math.round(firstAbortedAt - secondStartedAt) + ' ms after that' : 'never'}, ended ${Math.round(firstEndedAt - secondStartedAt)} ms after that`,
    ).to.be.below(secondStartedAt);
  });
});

/*
 * A route whose `maxHold` passes while a pre method still runs: the keeper releases the lock, and
 * the plugin then refuses to start any further route code (README, hapi: "Once the lock is
 * released, the plugin refuses to start any of them ... so route code never runs without the
 * lock"). The defect guarded against: the plugin's request state was not told of the keeper's
 * release, so the handler still started while another client, which took the lock as soon as
 * maxHold released it, held it: two holders of one document lock.
 */
describe('hapi maxHold passes while a pre method runs', () => {
  afterEach(stopServers);

  it('no pre method or handler starts after maxHold released the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'o' }]);
    const lock = writeLock({ collection, locktimeout: 2_000 });
    const other = writeLock({ collection, locktimeout: 5_000 }); // another client
    const otherClient: { held?: LockHandle } = {};
    let preStarted!: () => void;
    const routeHoldsTheLock = new Promise<void>((resolve) => (preStarted = resolve));
    let handlerRanWhileOtherHeld = false;
    const server = await makeServer((s) =>
      s.route({
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
      }),
    );
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
  });
});
