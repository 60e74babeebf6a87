/**
 * A sharded cluster whose clocks are further apart than `maxClockSkew` (a misconfigured host): a
 * router's `$$NOW` against the `$currentDate` of the shard that holds the document. monglock cannot
 * see a router that has not answered yet; what it promises is that a skew the replies show is
 * refused before any write judges a lock by it, and that a write which carried the caller's update
 * and then showed it is reported with the update applied (docs/guarantees.md, "Several clocks").
 *
 * Simulated (stress/simulated-cluster.ts): routers whose `$$NOW` is their own clock, and below a
 * shard whose primary's clock steps (every `$currentDate` it applies is written as its time).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, writeLock, type LockHandle, type MultiLock } from '../../lib';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { onShardClock } from '../support/shard-clock';
import { commandsSentBy, freshCollection, rejectionOf, sleep } from '../support/fixture';
import { isHandOverCall } from '../../stress/delayed-collection';
import { wrapWrites } from '../../stress/server-faults';
import { liveEntries } from '../support/lock-commands';

const LEASE = 10_000;
const RW = {
  locktimeouts: { read: LEASE, write: LEASE },
  lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } },
};

/** A multiLock on `raw` through one router whose clock is the shard's plus `offsetMs()`. */
function lockThrough(raw: Collection<Document>, offsetMs: () => number, maxClockSkew?: number): MultiLock {
  const collection = simulatedCluster(raw, { routers: [{ offsetMs }] });
  return multiLock({ collection, ...RW, ...(maxClockSkew !== undefined && { maxClockSkew }) });
}

/** Whether the entry of `handle` is still in its document, live. */
async function entryKept(raw: Collection<Document>, handle: LockHandle): Promise<boolean> {
  return (await liveEntries(raw, 'doc', handle.tag)).some((entry) => entry.id === handle.id);
}

/** A writer through a router on the shard's clock, after the skewed call: refused while the holder holds. */
async function secondWriter(raw: Collection<Document>, holder: LockHandle, maxClockSkew?: number): Promise<string | undefined> {
  const second = await lockThrough(raw, () => 0, maxClockSkew).acquire({ _id: 'doc' }, { tag: 'write' }).catch(() => undefined);
  return second && `a second writer got the lock (fence ${second.fence}) while the first one's remaining() was ${holder.remaining()} ms`;
}

describe('a sharded cluster whose clocks are further apart than maxClockSkew', () => {
  // A router far enough ahead that a stamp from its clock would judge the holder's fresh entry expired.
  const LAYOUTS = [
    { skew: 100, routerAhead: 15_000, said: 'maxClockSkew 100' },
    { skew: undefined, routerAhead: 20_000, said: 'the default maxClockSkew (1 s, learned from hello)' },
  ] as const;

  for (const { skew, routerAhead, said } of LAYOUTS) {
    it(`${said}: a lock's first call through a router ${routerAhead / 1_000} s ahead is refused before it writes, and the holder keeps its lock`, async function () {
      this.timeout(30_000);
      const raw = await freshCollection([{ _id: 'doc' }]);
      const holder = await lockThrough(raw, () => 0, skew).acquire({ _id: 'doc' }, { tag: 'write' });
      const detection = await rejectionOf(lockThrough(raw, () => routerAhead, skew).acquire({ _id: 'doc' }, { tag: 'read' }));
      expect(await entryKept(raw, holder), `the holder's entry is in its document (the skewed call said: ${detection.message})`).to.equal(true);
      expect(await secondWriter(raw, holder, skew)).to.equal(undefined);
      expect(detection.subtype, detection.message).to.equal('DbError');
      expect(detection.message).to.match(/clocks are at least \d+ ms apart.*maxClockSkew/);
      expect(holder.remaining(), 'the holder still counts on its lease').to.be.greaterThan(0);
    });
  }

  it('a router that steps ahead after the lock saw both clocks: its read is refused, and no later stamp comes from it', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'doc' }]);
    let ahead = 0;
    const stepping = lockThrough(raw, () => ahead, 100);
    await (await stepping.acquire({ _id: 'doc' }, { tag: 'read' })).release(); // both clocks seen, within the skew
    const holder = await lockThrough(raw, () => 0, 100).acquire({ _id: 'doc' }, { tag: 'write' });
    ahead = 15_000;
    const inspected = await stepping.inspect({ _id: 'doc' }).then(() => 'resolved', (error: Error) => error.message);
    const acquired = await rejectionOf(stepping.acquire({ _id: 'doc' }, { tag: 'read' }));
    expect(await entryKept(raw, holder), `the holder's entry is in its document (the acquisition said: ${acquired.message})`).to.equal(true);
    expect(await secondWriter(raw, holder, 100)).to.equal(undefined);
    expect(acquired.message).to.match(/clocks are at least \d+ ms apart/);
    expect(inspected, 'the read through the router ahead').to.match(/DbError: the deployment's clocks are at least \d+ ms apart/);
  });

  it('an extension with an update whose own reply shows the skew (the shard\'s clock stepped back): the update is reported applied', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'doc', n: 0 }]);
    let shardOffset = 0;
    const lock = writeLock({ collection: simulatedCluster(onShardClock(raw, () => shardOffset), { routers: [{ offsetMs: 0 }] }), locktimeout: LEASE, maxClockSkew: 100 });
    const held = await lock.acquire({ _id: 'doc' });
    shardOffset = -1_000; // the shard's primary fails over to a member whose clock is 1 s behind
    const outcome = await held.extend(LEASE, { update: { $inc: { n: 1 } } }).then(
      () => ({ said: 'resolved: no skew seen', applied: 'resolved: no skew seen' as unknown }),
      (error: Error & { data?: { applied?: unknown } }) => ({ said: error.message, applied: error.data?.applied }),
    );
    const n = (await raw.findOne({ _id: 'doc' as never }))?.n as unknown;
    expect(n, 'the update landed').to.equal(1);
    expect(outcome.applied, `the update landed, and the call said: ${outcome.said} (data.applied: ${String(outcome.applied)})`).to.equal(true);
    expect(outcome.said, 'the extension is refused naming the skew its reply showed').to.match(/clocks are at least \d+ ms apart/);
  });

  it('a hand-over whose own reply shows the skew (the shard\'s clock stepped back): the waiter is not handed the lock, and it is not left held', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'doc' }]);
    let shardOffset = 0;
    let handOvers = 0;
    const counted = wrapWrites(onShardClock(raw, () => shardOffset), (method, args, _n, send) => ((handOvers += isHandOverCall(method, args) ? 1 : 0), send(args)));
    const lock = writeLock({ collection: simulatedCluster(counted, { routers: [{ offsetMs: 0 }] }), locktimeout: LEASE, maxClockSkew: 100 });
    const holder = await lock.acquire({ _id: 'doc' });
    const waiting = lock.acquire({ _id: 'doc' }, { wait: 5_000 }).then(
      (handle) => `handed the lock (fence ${handle.fence}) over a skew its hand-over's reply showed`,
      (error: Error) => error.message,
    );
    await sleep(300); // the waiter was refused and sleeps: the release hands the lock over to it
    shardOffset = -1_000; // the shard's primary fails over to a member whose clock is 1 s behind
    const released = await holder.release().then(() => 'released', (error: Error) => error.message);
    expect(handOvers, 'the release was a hand-over').to.equal(1);
    expect(await waiting, 'the waiter is refused naming the skew').to.match(/clocks are at least \d+ ms apart/);
    expect(await liveEntries(raw, 'doc', 'write'), 'no lock left held').to.deep.equal([]);
    expect(released, "the holder's lock was released").to.equal('released');
  });

  it('what it costs: a lock\'s first call reads a router\'s clock and writes the shard\'s at once, before its write; later calls, and every call on one clock, send their write alone', async () => {
    const raw = await freshCollection([{ _id: 'a' }, { _id: 'b' }, { _id: 'c' }]);
    const oneClock = await commandsSentBy(() => writeLock({ collection: raw, locktimeout: LEASE }).acquire({ _id: 'c' }));
    expect(oneClock.commands, 'a first call on one clock (this server, not routed)').to.deep.equal(['findAndModify']);
    const lock = writeLock({ collection: simulatedCluster(raw, { routers: [{ offsetMs: 0 }] }), locktimeout: LEASE });
    const first = await commandsSentBy(() => lock.acquire({ _id: 'a' }));
    expect(first.error).to.equal(undefined);
    expect(first.commands.slice(0, 2).sort(), 'before the acquisition').to.deep.equal(['aggregate', 'findAndModify']);
    expect(first.commands.slice(2)).to.deep.equal(['findAndModify']);
    const later = await commandsSentBy(() => lock.acquire({ _id: 'b' }));
    expect(later.commands).to.deep.equal(['findAndModify']);
  });
});
