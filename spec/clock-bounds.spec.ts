import { expect } from 'chai';
import { MongoClient } from 'mongodb';
import { writeLock } from '../lib';
import { ServerClock } from '../lib/protocol/server-clock';
import { FaultProxy } from '../stress/fault-proxy';
import { freshCollection, mongoBackend } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

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
          // Lost: this round trip, and the width of the bounds on both sides (each at most a round trip), plus ms rounding.
          expect(remaining, 'at least the lease minus three round trips').to.be.at.least(lease - 3 * roundTrip - 4);
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
