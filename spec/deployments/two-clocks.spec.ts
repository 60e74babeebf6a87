/**
 * A sharded cluster has more than one clock: `$$NOW` is the routing mongos's, `$currentDate` the
 * shard primary's, and a driver spreads its commands over several mongos. Simulated here with
 * routers whose clocks are ahead of or behind the server's (stress/simulated-cluster.ts): a holder
 * and a waiter that reach the document through different routers. Neither a lock taken before the
 * holder's lease ended (by every clock that can judge it), nor a holder's guarded write that lands
 * after the waiter took over, may follow.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, resourceLocks, semaphore, writeLock, type LockHandle } from '../../lib';
import { simulatedCluster, type ClusterOptions } from '../../stress/simulated-cluster';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

/** How a holder and a waiter take the lock of one kind, each through its own collection object (its own router). */
interface Kind {
  readonly name: string;
  /** The lease, in ms. */
  readonly lease: number;
  readonly holder: (collection: Collection<Document>, skew: number | undefined) => Promise<LockHandle>;
  readonly waiter: (collection: Collection<Document>, skew: number | undefined) => Promise<LockHandle>;
}

const LEASE = 1_500;
const skewOption = (skew: number | undefined): { maxClockSkew?: number } => (skew === undefined ? {} : { maxClockSkew: skew });
const RW = { locktimeouts: { read: LEASE, write: LEASE }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } } };

const KINDS: readonly Kind[] = [
  {
    name: 'writeLock',
    lease: LEASE,
    holder: (c, skew) => writeLock({ collection: c, locktimeout: LEASE, ...skewOption(skew) }).acquire({ _id: 'doc' }),
    waiter: (c, skew) => writeLock({ collection: c, locktimeout: LEASE, ...skewOption(skew) }).acquire({ _id: 'doc' }, { wait: 15_000 }),
  },
  {
    name: 'multiLock (a reader, then a writer)',
    lease: LEASE,
    holder: (c, skew) => multiLock({ collection: c, ...RW, ...skewOption(skew) }).acquire({ _id: 'doc' }, { tag: 'read' }),
    waiter: (c, skew) => multiLock({ collection: c, ...RW, ...skewOption(skew) }).acquire({ _id: 'doc' }, { tag: 'write', wait: 15_000 }),
  },
  {
    name: 'semaphore of one permit',
    lease: LEASE,
    holder: (c, skew) => semaphore({ collection: c, limit: 1, locktimeout: LEASE, ...skewOption(skew) }).acquire({ _id: 'doc' }),
    waiter: (c, skew) => semaphore({ collection: c, limit: 1, locktimeout: LEASE, ...skewOption(skew) }).acquire({ _id: 'doc' }, { wait: 15_000 }),
  },
  {
    name: 'resource lock',
    lease: LEASE,
    holder: (c, skew) => resourceLocks({ collection: c, ...skewOption(skew) }).xlock('doc', 'holder', { ttl: LEASE }),
    waiter: (c, skew) => resourceLocks({ collection: c, ...skewOption(skew) }).xlock('doc', 'waiter', { ttl: LEASE, wait: 15_000 }),
  },
];

/** Where the holder's and the waiter's routers stand against the shard's clock, and the skew the locks assume (undefined: the default). */
const LAYOUTS = [
  { holder: 0, waiter: 400, skew: 500 },
  { holder: -400, waiter: 0, skew: 500 },
  { holder: 1_000, waiter: -1_000, skew: undefined },
  { holder: -1_000, waiter: 1_000, skew: undefined },
] as const;

/** What one run saw. */
interface Run {
  /** The holder's `remaining()` when the waiter's acquisition resolved. */
  readonly holderRemainingAtTakeOver: number;
  /** Whose guarded writes landed, in the order the server applied them. */
  readonly log: readonly string[];
}

/**
 * The holder takes the lock and never releases it; until its guard stops matching it keeps
 * writing through `guard()` (a guarded `$push` to the document's log). The waiter waits for the
 * lease to end, then writes through its own `guard()`.
 */
async function takeOver(kind: Kind, layout: (typeof LAYOUTS)[number]): Promise<Run> {
  const collection = await freshCollection([{ _id: 'doc', log: [] }]);
  const through = (offsetMs: number): Collection<Document> => simulatedCluster(collection, { routers: [{ offsetMs }] } satisfies ClusterOptions);
  const holderSide = through(layout.holder);
  const waiterSide = through(layout.waiter);
  const holder = await kind.holder(holderSide, layout.skew);
  let stop = false;
  const holderWrites = (async () => {
    while (!stop) {
      const written = await holderSide.updateOne(holder.guard(), { $push: { log: 'holder' } } as Document);
      if (written.matchedCount === 0) return;
      await sleep(5);
    }
  })();
  const waiter = await kind.waiter(waiterSide, layout.skew);
  const holderRemainingAtTakeOver = holder.remaining();
  await waiterSide.updateOne(waiter.guard(), { $push: { log: 'waiter' } } as Document);
  await sleep(50);
  stop = true;
  await holderWrites;
  const doc = await collection.findOne({ _id: 'doc' as never });
  return { holderRemainingAtTakeOver, log: (doc?.log ?? []) as string[] };
}

describe('a sharded cluster: routers whose clocks differ from the shard\'s', () => {
  for (const kind of KINDS) {
    it(`${kind.name}: a waiter through another router takes over only once the holder's lease has ended by every clock, and no guarded write of the holder lands after it`, async function () {
      this.timeout(60_000);
      // Each layout on its own document, at once: most of the time is spent waiting for leases to end.
      const runs = await Promise.all(LAYOUTS.map((layout) => takeOver(kind, layout)));
      runs.forEach((run, i) => {
        const where = `routers ${JSON.stringify(LAYOUTS[i])}`;
        expect(run.holderRemainingAtTakeOver, `${where}: the holder still counted on its lease when the waiter got it`).to.be.at.most(0);
        const firstWaiter = run.log.indexOf('waiter');
        expect(firstWaiter, `${where}: the waiter's guarded write landed`).to.be.at.least(0);
        expect(run.log.slice(firstWaiter), `${where}: the holder's guarded writes landed after the waiter's`).to.not.include('holder');
        expect(run.log.slice(0, firstWaiter), `${where}: the holder wrote while it held`).to.include('holder');
      });
    });
  }

  it('a skew between a router and the shard beyond maxClockSkew fails the call with DbError naming it, and locks nothing', async () => {
    const collection = await freshCollection([{ _id: 'doc' }]);
    const lock = writeLock({ collection: simulatedCluster(collection, { routers: [{ offsetMs: 3_000 }] }), locktimeout: 5_000, maxClockSkew: 500 });
    // Before its first stamp it reads the router's clock and writes the shard's, 3 s behind: it sends no acquisition.
    const error = await rejectionOf(lock.acquire({ _id: 'doc' }));
    expect(error).to.include({ subtype: 'DbError' });
    expect(error.message).to.match(/clocks are at least \d+ ms apart.*maxClockSkew/);
    expect(Number(/at least (\d+) ms/.exec(error.message)?.[1])).to.be.within(2_500, 3_000);
    const doc = await collection.findOne({ _id: 'doc' as never });
    const entries = (doc?.lock?.tags?.write ?? []) as Array<{ exp: Date }>;
    expect(entries.filter((entry) => entry.exp.getTime() > realNow()), 'no lock is left live').to.have.length(0);
  });
});
