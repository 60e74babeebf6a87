/**
 * A failover to a primary whose clock is behind the old one's (or a clock set back): an exclusive
 * tag's stamps never decrease (a monglock v2 timestamp proof names one lock), so a document locked
 * just before refuses every stamp until the new clock has passed its last one. Simulated with a
 * primary whose `$$NOW` steps back (stress/simulated-cluster.ts, not sharded).
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('a primary whose clock is behind the stamp of a document\'s last lock', () => {
  it('an acquisition waits for the clock to pass that stamp (within its timeout), then gets the lock', async () => {
    const raw = await freshCollection([{ _id: 'a' }]);
    let step = 0;
    const lock = writeLock({ collection: simulatedCluster(raw, { sharded: false, routers: [{ offsetMs: () => step }] }), locktimeout: 5_000 });
    await (await lock.acquire({ _id: 'a' })).release();
    step = -300; // the new primary's clock is 300 ms behind
    const started = realNow();
    const handle = await lock.acquire({ _id: 'a' });
    expect(realNow() - started, 'it waited for the clock').to.be.at.least(150);
    expect(handle.remaining()).to.be.above(4_000);
    await handle.release();
  });

  it('a clock further behind than the call\'s timeout: DbError naming it, and nothing is locked', async () => {
    const raw = await freshCollection([{ _id: 'a' }]);
    let step = 0;
    const lock = writeLock({ collection: simulatedCluster(raw, { sharded: false, routers: [{ offsetMs: () => step }] }), locktimeout: 5_000, timeout: 1_000 });
    await (await lock.acquire({ _id: 'a' })).release();
    step = -20_000;
    const error = await rejectionOf(lock.acquire({ _id: 'a' }));
    expect(error.subtype).to.equal('DbError');
    expect(error.message).to.match(/server's clock is about \d+ ms behind the stamp of this document's last acquisition/);
    const doc = await raw.findOne({ _id: 'a' as never });
    expect(((doc?.lock?.tags?.write ?? []) as unknown[]).length, 'no entry written').to.equal(0);
  });
});
