/**
 * A handle addresses the document it locked by that document's `{ _id }`, whatever filter found it
 * and whatever part of the document was asked for: its guard(), extend(), release() and commit
 * find the document for as long as the lock is held.
 */
import { expect } from 'chai';
import { commit, writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';
import { whatAnAcquisitionGets } from '../support/lock-commands';

/*
 * The defect guarded against: the handle that writeLock.extend(filter, { lock }) resolves
 * addressed the caller's filter instead. Once the document no longer matched that filter, its
 * guard() never matched and its release() failed with RessourceNotFound: the lock stayed until its
 * lease ended.
 */
describe('the handle returned by extend(filter, { lock })', () => {
  it('a job queue that moves the job from open to running: guard() and release() of the extended handle still find the document', async () => {
    const collection = await freshCollection([{ _id: 1, status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000 });
    const handle = await jobs.acquire({ status: 'open' });
    const extended = await jobs.extend({ status: 'open' }, { lock: handle, locktimeout: 20_000 });
    const started = (await collection.updateOne(extended.guard(), { $set: { status: 'running' } })).modifiedCount;
    const finished = (await collection.updateOne(extended.guard(), { $set: { status: 'done' } })).modifiedCount;
    const released = await extended.release().then(() => 'released', (e: Error & { subtype?: string }) => e.subtype);
    expect({ started, finished, released }).to.deep.equal({ started: 1, finished: 1, released: 'released' });
  });
});

/*
 * `acquire(filter, { document })` with a projection that excludes `_id` (`{ _id: 0 }`,
 * `{ _id: 0, balance: 1 }`). The defect guarded against: the projection was passed to
 * findOneAndUpdate as is, so the reply had no `_id`, and the handle's target built from it was
 * `{ _id: undefined }` (sent as `_id: null`): the handle addressed no document, its release was
 * `RessourceNotFound` (which using() ignores), its commit failed, and the lock stayed held until
 * its lease ended.
 */

describe('a document projection without _id', () => {
  it('handle.release() releases a lock acquired with document: { _id: 0, balance: 1 }', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const handle = await accounts.acquire({ _id: 1 }, { document: { _id: 0, balance: 1 } });
    expect(handle.document).to.deep.equal({ balance: 100 });
    const released = await handle.release().then(
      () => 'released',
      (error: Error) => error.message,
    );
    expect(released).to.equal('released');
    expect(await whatAnAcquisitionGets(accounts, { _id: 1 })).to.equal('acquired');
  });

  it('using() with document: { _id: 0 } releases the lock when it settles', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const result = await accounts.using({ _id: 1 }, { document: { _id: 0 } }, (lock) => lock.document?.balance as number);
    expect(result).to.equal(100);
    expect(await whatAnAcquisitionGets(accounts, { _id: 1 }), 'the lock after using() resolved').to.equal('acquired');
  });

  it('using() with document: { _id: 0 } applies its commit', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, balance: 100 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await accounts
      .using({ _id: 1 }, { document: { _id: 0, balance: 1 } }, (lock) => commit({ $set: { balance: (lock.document?.balance as number) - 30 } }, 'committed'))
      .catch((error: Error) => `rejected: ${error.message}`);
    const doc = await collection.findOne({ _id: 1 as never });
    expect({ outcome, balance: doc?.balance }).to.deep.equal({ outcome: 'committed', balance: 70 });
  });

  it('a projection without _id is either refused up front or works (not a handle on { _id: null })', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const accounts = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await accounts.acquire({ _id: 1 }, { document: { _id: 0 } }).then(
      async (handle) => {
        const guarded = await collection.countDocuments(handle.guard());
        await handle.release().catch(() => undefined);
        return guarded === 1 ? 'works' : `handle.guard() matches ${guarded} documents while the lock is held`;
      },
      (error: Error) => (error.name === 'TypeError' ? 'refused up front' : error.message),
    );
    expect(['works', 'refused up front']).to.include(outcome);
  });
});
