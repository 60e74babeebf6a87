import { expect } from 'chai';
import { MongoClient, type Collection, type Document } from 'mongodb';
import { multiLock, writeLock } from '../../lib';
import { ServerClock } from '../../lib/protocol/server-clock';
import { delayedCollection } from '../../stress/delayed-collection';
import { FaultProxy } from '../../stress/fault-proxy';
import { realNow } from '../support/clock';
import { freshCollection, mongoBackend, sleep } from '../support/fixture';

describe('clock bounds: how much of a lease a holder can rely on', () => {
  it('the bounds enclose the server\'s clock, and their width is at most the best round trip', () => {
    let local = 1_000;
    const clock = new ServerClock(() => local);
    expect(clock.upper()).to.equal(Infinity);
    // The server read 50_000 somewhere between sending at 1_000 and the reply at 1_010.
    local = 1_010;
    clock.observe(new Date(50_000), 1_000, 1_010);
    expect(clock.lower()).to.equal(50_000);
    expect(clock.upper()).to.be.within(50_011, 50_012); // + the drift allowance (1,000 ppm), rounded up
    // A tighter reply narrows the bounds; a looser one does not widen them.
    local = 2_000;
    clock.observe(new Date(50_995), 1_996, 1_998);
    clock.observe(new Date(50_500), 1_000, 1_999);
    expect(clock.lower()).to.be.within(50_996, 50_997);
    expect(clock.upper()).to.be.within(51_000, 51_002);
    // A local clock that steps back drops them: nothing can be relied on until the next reply.
    local = 1_500;
    expect(clock.upper()).to.equal(Infinity);
  });

  for (const latency of [0, 20]) {
    it(`at ${latency} ms of added latency each way: a handle's remaining() at acquisition is the lease minus a few round trips, never more than the server grants`, async function () {
      this.timeout(30_000);
      const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
      const proxy = new FaultProxy(hostname, Number(port));
      await proxy.start();
      const client = new MongoClient(proxy.uri(), { maxPoolSize: 1 });
      try {
        await client.connect();
        const collection = await freshCollection([{ _id: 1 }]);
        const lease = 1_000;
        const lock = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: lease });
        proxy.set(latency > 0 ? { kind: 'latency', ms: latency } : { kind: 'none' });
        const fractions: number[] = [];
        const slack: number[] = [];
        for (let i = 0; i < 20; i++) {
          const sent = realNow();
          const handle = await lock.acquire({ _id: 1 });
          const roundTrip = realNow() - sent;
          const remaining = handle.remaining();
          // The server's real expiry is handle.expiresAt; by its clock, at least this much is left now.
          const serverLeft = handle.expiresAt - realNow();
          expect(remaining, 'never more than the server grants').to.be.at.most(serverLeft + 2);
          // Lost: this round trip, and the width of the bounds on both sides (each at most a round trip), plus ms rounding
          // and the event loop's turns around the call on a loaded machine (a few ms: a 2-core machine with a busy loop beside lost 8 ms to 6.4).
          expect(remaining, 'at least the lease minus three round trips').to.be.at.least(lease - 3 * roundTrip - 20);
          fractions.push(remaining / lease);
          slack.push(serverLeft - remaining);
          await handle.release();
        }
        fractions.sort((a, b) => a - b);
        const median = fractions[Math.floor(fractions.length / 2)]!;
        console.log(`      backend ${mongoBackend().server}, latency ${latency} ms each way: remaining()/lease at acquisition median ${(median * 100).toFixed(1)} %, worst ${(fractions[0]! * 100).toFixed(1)} %; the server still grants ${Math.max(...slack).toFixed(0)} ms more at most`);
      } finally {
        await client.close(true).catch(() => undefined);
        await proxy.stop();
      }
    });
  }
});

/*
 * The `clock` option takes any "ms since the epoch" function (Date.now is the obvious choice), and
 * such a clock can step backwards (an NTP step, a VM restored from a snapshot). The defect guarded
 * against: ServerClock clamped the elapsed time to 0 (`Math.max(0, now - anchor.local)`), which
 * froze the upper bound of the server's clock, so the holder's view (handle.remaining(), the lease
 * keeper) believed in a lease the server had already ended; and a reply whose request left before
 * the step was ignored (`arrivedAt < sentAt`), so an extension in flight across the step did not
 * correct it either.
 */
describe('the injected local clock steps backwards', () => {
  it('handle.remaining() reports 0 once another client holds the lock', async function () {
    this.timeout(10_000);
    const collection = await freshCollection([{ _id: 1 }]);
    let stepBack = 0;
    const lock = writeLock({ collection, locktimeout: 1_000, clock: () => realNow() - stepBack });
    const other = writeLock({ collection, locktimeout: 1_000 });
    const handle = await lock.acquire({ _id: 1 });
    stepBack = 5_000; // the local clock is set back 5 s
    const next = await other.acquire({ _id: 1 }, { wait: 3_000 });
    const left = handle.remaining();
    await next.release();
    expect(left, 'ms the first holder believes it still holds the lock, while another client holds it').to.equal(0);
  });

  it('using(): a step back while an extension is in flight aborts the body\'s signal before another client takes the lock', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    let stepBack = 0;
    // The holder's extension replies take 100 ms to come back, its explaining reads 300 ms.
    const slow = delayedCollection(collection, {
      reply: (method, n) => (method === 'findOneAndUpdate' && n >= 2 ? 100 : method === 'aggregate' ? 300 : 0),
    });
    const lock = writeLock({ collection: slow, locktimeout: 2_000, clock: () => realNow() - stepBack });
    const other = writeLock({ collection, locktimeout: 2_000 });
    let abortedAt = 0;
    const start = realNow();
    const holding = lock.using({ _id: 1 }, undefined, async (_handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 6_000);
      });
    });
    // The keeper extends at about 1,000 ms; its reply arrives about 100 ms later. Step back meanwhile.
    setTimeout(() => (stepBack = 10_000), 1_050);
    await sleep(100);
    const next = await other.acquire({ _id: 1 }, { wait: 8_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    expect(abortedAt, 'the body\'s signal aborted').to.be.greaterThan(0);
    expect(
      abortedAt,
      `another client acquired at +${Math.round(acquiredAt - start)} ms; the body's signal aborted at +${Math.round(abortedAt - start)} ms`,
    ).to.be.below(acquiredAt);
  });
});

/*
 * ServerClock.observe() resets its bounds when a reply contradicts them (the server's clock was
 * stepped, or another primary with another clock took over). The defect guarded against: the
 * highest server time reached (`lastReached`) was a running maximum never reset, and release()
 * prunes entries with `exp <= lastReached()` as "expired by a time the server has reached"; so
 * after a failover to a primary whose clock is behind the old one's, a client's release removed
 * other holders' live entries.
 *
 * The failover is simulated: the first client's acquire reply carries a server time 5 s ahead of
 * the (single) test server, as a reply from an old primary with a fast clock would.
 */

/** The collection as seen through an old primary whose clock ran `aheadMs` fast, for the first `calls` findOneAndUpdate replies. */
function oldPrimaryAhead(collection: Collection<Document>, aheadMs: number, calls: number): Collection<Document> {
  let seen = 0;
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property !== 'findOneAndUpdate') return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const result = (await (value as (...a: unknown[]) => Promise<Document | null>).apply(target, args)) as Document | null;
        if (++seen <= calls && result?.lock?.now instanceof Date) result.lock.now = new Date(result.lock.now.getTime() + aheadMs);
        return result;
      };
    },
  });
}

describe('a release never prunes by a time the server did not check', () => {
  it('after a failover to a primary 5 s behind, a release leaves another reader\'s live entry, and a writer is refused', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const options = {
      locktimeouts: { read: 3_000, write: 3_000 },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } },
    };
    const c1 = multiLock({ collection: oldPrimaryAhead(collection, 5_000, 1), ...options });
    const c2 = multiLock({ collection, ...options });
    const c3 = multiLock({ collection, ...options });
    const mine = await c1.acquire({ _id: 1 }, { tag: 'read', locktimeout: 20_000 }); // on the old primary
    // failover: from now on every reply comes from the new primary (the test server)
    const reader = await c2.acquire({ _id: 1 }, { tag: 'read' });
    await mine.release();
    const writer = await c3.acquire({ _id: 1 }, { tag: 'write' }).then(() => `acquired while the reader has ${reader.remaining()} ms left`, (e: Error & { subtype?: string }) => e.subtype);
    expect(writer, 'a writer next to a live reader').to.equal('CooperativeLock');
  });
});
