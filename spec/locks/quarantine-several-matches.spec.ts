/**
 * Review of the quarantine (issue 41 §3): "a filter that matches several documents skips
 * quarantined ones (first free match)", also for a call that waits.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';

describe('quarantine and a filter that matches several documents', function () {
  this.timeout(30_000);

  it('a waiting acquisition whose filter matches a quarantined document and a held one waits for the held one (the quarantined one is skipped, not a refusal)', async () => {
    const collection = await freshCollection([{ _id: 1, queue: 'in' }, { _id: 2, queue: 'in' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    await (await lock.acquire({ _id: 1 })).quarantine({ reason: 'bad payload' });
    const held = await lock.acquire({ _id: 2 });
    setTimeout(() => void held.release(), 300);
    const outcome = await lock.acquire({ queue: 'in' }, { wait: 5_000 }).then(
      async (handle) => {
        const doc = await collection.findOne({ 'lock.tags.write.id': handle.id } as never);
        await handle.release();
        return `acquired ${String(doc?._id)}`;
      },
      (error: Error) => `${(error as { subtype?: string }).subtype ?? error.name}: ${error.message}`,
    );
    expect(outcome).to.equal('acquired 2');
  });
});
