/**
 * A lock object idle for a while (hours here) on a sharded cluster: the shard's clock it saw last
 * has aged, and the drift allowed since (1,000 ppm each way) could hide a router further ahead than
 * maxClockSkew. Before, a read through such a router entered the bounds its stamps come from, and
 * its next acquisition judged a live holder's entry expired and replaced it (and the `judged` stamp
 * it recorded kept live readers dead for a later assertive writer); the skew was refused only once
 * its own reply showed the shard's clock. Now a stale shard clock is seen afresh (a clock write,
 * beside the read) before the next stamp, and a read is not taken in while it is stale.
 *
 * Simulated: a sharded cluster (stress/simulated-cluster.ts) whose clocks all move on by three hours
 * at once (the routers' `$$NOW`, and the shard's `$currentDate` written as its time), while the idle
 * lock object's local clock (the `clock` option) moves on by the same three hours. One router is
 * 8 s ahead of the shard (maxClockSkew 100 ms says at most 0.1 s).
 */
import { expect } from 'chai';
import { multiLock, resourceLocks, writeLock } from '../../lib';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { realNow } from '../support/clock';
import { onShardClock } from '../support/shard-clock';
import { freshCollection } from '../support/fixture';
import { liveEntries } from '../support/lock-commands';

const SKEW = 100;
const IDLE = 3 * 3_600_000;
const AHEAD = 8_000;
const LEASE = 5_000;

describe('a lock object idle for hours, then routed through a router further ahead than maxClockSkew', () => {
  it('its acquisition does not take (or free) the lock of a holder whose remaining() is positive', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'warm' }, { _id: 'doc' }]);
    let elapsed = 0; // how far every clock of the deployment has moved on beyond real time
    const shard = onShardClock(raw, () => elapsed);
    const inSync = { offsetMs: () => elapsed };
    const ahead = { offsetMs: () => elapsed + AHEAD };
    // The idle lock object: its first calls go through the router in sync; after the idle time, through the one ahead.
    const idle = writeLock({
      collection: simulatedCluster(shard, { routers: [inSync, ahead], pick: () => (elapsed === 0 ? 0 : 1) }),
      locktimeout: LEASE,
      maxClockSkew: SKEW,
      clock: () => performance.now() + elapsed,
    });
    await (await idle.acquire({ _id: 'warm' })).release(); // both clocks seen, within the skew
    elapsed = IDLE; // three hours later
    const holder = await writeLock({ collection: simulatedCluster(shard, { routers: [inSync] }), locktimeout: LEASE, maxClockSkew: SKEW }).acquire({ _id: 'doc' });
    let holderKept: boolean | undefined;
    let remainingThen = 0;
    const started = realNow();
    const said = idle.acquire({ _id: 'doc' }).then(
      (handle) => `acquired (fence ${handle.fence}, remaining() ${handle.remaining()} ms)`,
      (error: Error) => `failed after ${realNow() - started} ms: ${error.message}`,
    );
    // Watch the holder's entry while the idle lock's call runs (it may wait before it reports).
    while (realNow() - started < 1_500) {
      const entries = await liveEntries(raw, 'doc', 'write');
      remainingThen = holder.remaining();
      holderKept = entries.some((entry) => entry.id === holder.id);
      if (!holderKept) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const third = await writeLock({ collection: simulatedCluster(shard, { routers: [inSync] }), locktimeout: LEASE, maxClockSkew: SKEW })
      .acquire({ _id: 'doc' }, { wait: 10_000 })
      .then(
        (handle) => ({ said: `${realNow() - started} ms after the idle lock's call, a third caller acquired it (fence ${handle.fence}) while the holder's remaining() was ${holder.remaining()} ms`, beside: holder.remaining() }),
        () => ({ said: 'refused', beside: 0 }),
      );
    const story = `the holder's entry kept: ${holderKept} (its remaining() then ${remainingThen} ms); ${third.said}; the idle lock's acquisition ${await said}`;
    expect(remainingThen, story).to.be.greaterThan(0);
    expect(holderKept, story).to.equal(true);
    expect(third.beside, `a third caller admitted while the holder held: ${story}`).to.equal(0);
  });

  it('an idle lock object\'s read through that router does not let a writer in beside a reader whose remaining() is positive', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'warm' }, { _id: 'doc' }]);
    let elapsed = 0;
    const shard = onShardClock(raw, () => elapsed);
    const inSync = { offsetMs: () => elapsed };
    const ahead = { offsetMs: () => elapsed + AHEAD };
    const RW = {
      locktimeouts: { read: LEASE, write: LEASE },
      lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      maxClockSkew: SKEW,
    };
    const idle = multiLock({ collection: simulatedCluster(shard, { routers: [inSync, ahead], pick: () => (elapsed === 0 ? 0 : 1) }), ...RW, clock: () => performance.now() + elapsed });
    await (await idle.acquire({ _id: 'warm' }, { tag: 'read' })).release(); // both clocks seen, within the skew
    elapsed = IDLE;
    const reader = await multiLock({ collection: simulatedCluster(shard, { routers: [inSync] }), ...RW }).acquire({ _id: 'doc' }, { tag: 'read' });
    const said = await idle.acquire({ _id: 'doc' }, { tag: 'read' }).then(
      (handle) => `acquired (remaining() ${handle.remaining()} ms)`,
      (error: Error) => `failed: ${error.message}`,
    );
    const writer = await multiLock({ collection: simulatedCluster(shard, { routers: [inSync] }), ...RW })
      .acquire({ _id: 'doc' }, { tag: 'write' })
      .then(
        (handle) => handle,
        (error: Error & { subtype?: string }) => error,
      );
    const readerLeft = reader.remaining();
    const story =
      `the idle lock's read ${said}; then a writer: ${writer instanceof Error ? `${writer.subtype}: ${writer.message}` : `holds write, remaining() ${writer.remaining()} ms`}; ` +
      `the reader's remaining() ${readerLeft} ms`;
    expect(readerLeft, story).to.be.greaterThan(0);
    expect(writer instanceof Error, story).to.equal(true);
  });

  it('a resource lock idle for hours, on a resource whose document does not exist yet (no document to write the shard\'s clock in): locks it', async function () {
    this.timeout(30_000);
    const raw = await freshCollection();
    let elapsed = 0;
    const shard = onShardClock(raw, () => elapsed);
    const resources = resourceLocks({ collection: simulatedCluster(shard, { routers: [{ offsetMs: () => elapsed }] }), maxClockSkew: SKEW, clock: () => performance.now() + elapsed });
    await resources.xlock('warm', 'warm-lock', { ttl: LEASE });
    await resources.unlock('warm-lock');
    elapsed = IDLE;
    const said = await resources.xlock('new-resource', 'new-lock', { ttl: LEASE }).then(
      () => 'locked',
      (error: Error) => `failed: ${error.message}`,
    );
    expect(said).to.equal('locked');
  });
});
