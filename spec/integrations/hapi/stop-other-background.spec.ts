/**
 * A suspected item of issue 40: `server.stop()` waited for background lock work that was not its
 * own (the release of a lock an abandoned acquisition of any caller in the process wrote, up to
 * that call's reply). Its onPostStop now awaits only the background work of its own requests'
 * acquisitions (lib/common/background.ts, withOrigin).
 */
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: server.stop() and background lock work of other callers', () => {
  afterEach(stopServers);

  // Failed at 7291c0e: the stop waited for the other caller's reply (['the reply came', 'the stop resolved']): onPostStop awaited all the process's background work.
  it("a stop does not wait for the reply of another caller's abandoned acquisition", async function () {
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
