/**
 * Review 3: in fair mode, once a waiter holds a ticket, WaitingPlace.filter() replaces the
 * caller's filter by the ticket's document `{ _id }` (lib/waiting-place.ts, `filter()`), and
 * document-lock.ts passes that to every further attempt. The rest of the caller's filter is never
 * checked again: a waiter for `{ _id, status: 'open' }` acquires the document after the holder
 * closed it, and a waiter for "any open job" is pinned to the first job that refused it and
 * acquires it once done. Without `fair`, the same waits end in `RessourceNotFound` (or lock an
 * open job), as the filter says.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../lib';
import { freshCollection, rejectionOf, sleep } from './support/fixture';

async function ticketCount(collection: Collection<Document>, id: unknown): Promise<number> {
  const queue = ((await collection.findOne({ _id: id as never }))?.lock?.queue ?? []) as unknown[];
  return queue.length;
}

describe('review 3 (fixed): a fair waiter keeps the caller\'s filter', () => {
  it('without fair (control): a waiter for { _id, status: "open" } does not get the job once it was closed', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000 });
    const holder = await jobs.acquire({ _id: 'job-1', status: 'open' });
    const waiter = jobs.acquire({ _id: 'job-1', status: 'open' }, { wait: 3_000 });
    await sleep(300);
    await holder.release({ update: { $set: { status: 'done' } } });
    const error = await rejectionOf(waiter);
    expect(error.subtype).to.equal('RessourceNotFound');
  });

  it('fair: a waiter for { _id, status: "open" } does not get the job once the holder closed it', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await jobs.acquire({ _id: 'job-1', status: 'open' });
    const waiter = jobs.acquire({ _id: 'job-1', status: 'open' }, { wait: 3_000 });
    for (let waited = 0; (await ticketCount(collection, 'job-1')) === 0; waited += 20) {
      expect(waited, 'the waiter took a ticket').to.be.below(3_000);
      await sleep(20);
    }
    await holder.release({ update: { $set: { status: 'done' } } }); // the job is done
    const outcome = await waiter.then(
      async (handle) => {
        const doc = await collection.findOne({ _id: 'job-1' as never });
        await handle.release();
        return `acquired a lock on a document with status ${JSON.stringify(doc?.status)}`;
      },
      (error: Error & { subtype?: string }) => `rejected: ${error.subtype ?? error.message}`,
    );
    expect(outcome, 'the filter { status: "open" } no longer matches job-1').to.equal('rejected: RessourceNotFound');
  });

  it('fair: a waiter for "any open job" does not lock a job that is no longer open', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 'job-1', status: 'open' }]);
    const jobs = writeLock({ collection, locktimeout: 10_000, fair: true });
    const holder = await jobs.acquire({ status: 'open' }); // job-1, the only open job
    const waiter = jobs.acquire({ status: 'open' }, { wait: 3_000 });
    await sleep(300);
    // A filter that does not name the document's _id takes no ticket: it waits as without fair mode.
    expect(await ticketCount(collection, 'job-1'), 'no ticket pins the waiter to job-1').to.equal(0);
    await collection.insertOne({ _id: 'job-2' as never, status: 'open' }); // a new job comes in
    await holder.release({ update: { $set: { status: 'done' } } }); // job-1 is done
    const handle = await waiter;
    const doc = await collection.findOne({ 'lock.tags.write.id': handle.id });
    await handle.release();
    expect(doc?._id, `the waiter for { status: 'open' } locked ${String(doc?._id)} (status ${String(doc?.status)})`).to.equal('job-2');
  });
});
