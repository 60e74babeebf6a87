/**
 * Review of 6cab1b9 (claim 3: handles address their document by `{ _id }`): the handle that
 * writeLock.extend(filter, { lock }) resolves addresses the caller's filter instead. Once the
 * document no longer matches that filter, its guard() never matches and its release() fails with
 * RessourceNotFound: the lock stays until its lease ends.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { freshCollection } from './support/fixture';

describe('review 1: the handle returned by extend(filter, { lock })', () => {
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
