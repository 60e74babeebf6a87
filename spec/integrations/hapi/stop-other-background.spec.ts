/**
 * A suspected item of issue 40: `server.stop()` waits for background lock work that is not its
 * own. The plugin's onPostStop awaits `backgroundSettled()`, which is process-wide: the release of
 * a lock that an abandoned acquisition of any caller in the process wrote (a `using()` elsewhere,
 * another server) is waited for too, up to that call's reply.
 */
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: server.stop() and background lock work of other callers', () => {
  afterEach(stopServers);

  // Skipped: it fails on main at 7291c0e (the stop waits for the other caller's reply: ['the reply came', 'the stop resolved']).
  // A fix tags background work with the call that started it (lib/common/background.ts, lib/locks/acquisition.ts:
  // another helper's area in issue 40), so that the plugin waits only for its own requests' acquisitions.
  it.skip("a stop does not wait for the reply of another caller's abandoned acquisition", async function () {
    this.timeout(20_000);
    const seeded = await freshCollection([{ _id: 'x' }]);
    const order: string[] = [];
    let letReplyGo!: () => void;
    const replyHeld = new Promise<void>((resolve) => (letReplyGo = resolve));
    let attempted!: () => void;
    const sent = new Promise<void>((resolve) => (attempted = resolve));
    // Another caller in the process, not of this server: its acquisition's reply is held back until the test lets it go (3 s at most).
    const slow = delayedCollection(seeded, {
      request: (method) => void (method === 'findOneAndUpdate' && attempted()),
      reply: (method) => (method === 'findOneAndUpdate' ? Promise.race([replyHeld, new Promise((resolve) => setTimeout(resolve, 3_000))]).then(() => void order.push('the reply came')) : undefined),
    });
    const caller = new AbortController();
    const elsewhere = writeLock({ collection: slow, locktimeout: 10_000 }).acquire({ _id: 'x' }, { signal: caller.signal });
    await sent;
    caller.abort(new Error('the other caller gave up')); // its lock is released in the background once the reply comes
    await elsewhere.catch(() => undefined);

    const server = await makeServer(() => undefined);
    await server.start();
    await server.stop({ timeout: 5_000 });
    order.push('the stop resolved');
    letReplyGo();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(order, 'the stop of a server without requests waited for nothing of the other caller').to.deep.equal(['the stop resolved', 'the reply came']);
  });
});
