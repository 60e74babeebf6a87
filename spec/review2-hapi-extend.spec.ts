/**
 * Review 2 of ceca4ec: using() replans its lease keeper whenever the handle's expiry changes
 * (LockHandle.watchExpiry), but the hapi plugin's keeper (hapi-lifecycle.ts `acquired`) does not
 * watch the handle. A handler that extends its own lock (`lockOf(request).lock.extend()`, which
 * defaults to the lock's own lease, not the route's `locktimeout`) shortens the server's lease
 * under the keeper's plan: `lockOf(request).signal` stays un-aborted while another request
 * acquires the lock and runs its handler. The same scenario as review-using-extend, in hapi.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../lib';
import { lockOf, monglockPlugin } from '../lib/hapi';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 2: hapi handler that extends its own lock', () => {
  let server: Hapi.Server | undefined;
  afterEach(async () => {
    await server?.stop({ timeout: 1_000 });
  });

  it('route locktimeout 4000, lock default 1000, handler calls lock.extend(): the keeper replans, no second handler while the first one\'s signal is live', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const orders = writeLock({ collection, locktimeout: 1_000 });
    let firstAbortedAt = 0;
    let secondStartedAt = 0;
    let firstEndedAt = 0;
    server = Hapi.server({ debug: false });
    await server.register({ plugin: monglockPlugin });
    server.route({
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
    });
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
