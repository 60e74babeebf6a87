/**
 * A group's release() (and extend()) with params that one of its members would refuse (an update
 * naming another member's lock field): refused before anything is written, for every member
 * alike; a group takes call options only, so it is never left half released.
 */
import { expect } from 'chai';
import { acquireAll, writeLock } from '../../lib';
import { freshCollection, rejectionOf, snapshotOf } from '../support/fixture';

describe('LockGroup release()/extend() params: refused before anything is written', function () {
  this.timeout(30_000);

  it('an update that one member refuses (it names that lock\'s field) writes nothing and releases nothing', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const orders = writeLock({ collection: accounts, field: 'lock', locktimeout: 30_000 });
    const audits = writeLock({ collection: accounts, field: 'audit', locktimeout: 30_000 });
    const group = await acquireAll([{ lock: orders, filter: { _id: 1 } }, { lock: audits, filter: { _id: 2 } }]);
    const before = await snapshotOf(accounts);
    const refused = await rejectionOf(group.release({ update: { $set: { audit: 'done' } } } as never));
    expect(refused).to.be.instanceOf(TypeError);
    expect(refused.message).to.match(/`params.update`: a group applies one update per document/);
    const after = await accounts.find().sort({ _id: 1 }).toArray();
    expect(
      await snapshotOf(accounts),
      `refused with "${refused.message}", yet document 1 is now ${JSON.stringify(after[0])}`,
    ).to.equal(before);
    await group.release();
  });

  it('the same with extend(): an update one member refuses extends and writes nothing', async () => {
    const accounts = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const orders = writeLock({ collection: accounts, field: 'lock', locktimeout: 30_000 });
    const audits = writeLock({ collection: accounts, field: 'audit', locktimeout: 30_000 });
    const group = await acquireAll([{ lock: orders, filter: { _id: 1 } }, { lock: audits, filter: { _id: 2 } }]);
    const before = await snapshotOf(accounts);
    const refused = await rejectionOf(group.extend(20_000, { update: { $set: { audit: 'done' } } } as never));
    expect(refused).to.be.instanceOf(TypeError);
    const after = await accounts.find().sort({ _id: 1 }).toArray();
    expect(await snapshotOf(accounts), `refused with "${refused.message}", yet document 1 is now ${JSON.stringify(after[0])}`).to.equal(before);
    await group.release();
  });
});
