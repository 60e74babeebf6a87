/**
 * The first use of a resource while purges in another process delete its empty document between
 * the creating upsert and the checked update: with `wait`, the document is created again (and
 * again) until the lock is taken or the wait ends; never `RessourceNotFound` while waiting.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { isLockError, resourceLocks } from '../../lib';
import { wrapWrites } from '../../stress/server-faults';
import { freshCollection } from '../support/fixture';

/** `collection`, whose first `times` creating upserts are each followed by a purge (another process's) deleting the fresh empty document. */
function purgedAfterCreation(collection: Collection<Document>, times: number): { collection: Collection<Document>; purged: () => number } {
  let purged = 0;
  const wrapped = wrapWrites(collection, async (method, args, _n, send) => {
    const result = await send(args);
    const isCreation = method === 'updateOne' && (args[2] as { upsert?: boolean } | undefined)?.upsert === true;
    if (isCreation && purged < times) {
      purged++;
      await collection.deleteOne({ _id: (args[0] as Document)._id as never, 'lock.tags.exclusive.0': { $exists: false }, 'lock.tags.shared.0': { $exists: false } });
    }
    return result;
  });
  return { collection: wrapped, purged: () => purged };
}

describe('first use of a resource while purges delete its fresh document', () => {
  for (const kind of ['xlock', 'slock'] as const) {
    it(`${kind} with wait: the document purged five times after its creation is created again, and the lock is taken`, async function () {
      this.timeout(20_000);
      const raw = await freshCollection();
      const { collection, purged } = purgedAfterCreation(raw, 5);
      const locks = resourceLocks({ collection });
      const params = { ttl: 10_000, wait: 10_000 };
      const outcome = await (kind === 'xlock' ? locks.xlock('r', 'job', params) : locks.slock('r', 'job', params)).catch((error: unknown) => error);
      expect(isLockError(outcome, 'RessourceNotFound'), `not RessourceNotFound while waiting: ${String(outcome)}`).to.equal(false);
      expect(outcome, `the lock is taken: ${String(outcome)}`).to.have.property('resource', 'r');
      expect(purged(), 'the document was purged five times').to.equal(5);
      const held = await resourceLocks({ collection: raw }).status({ resource: 'r' });
      expect(held.map((status) => status.lockId), 'the lock is held in the re-created document').to.deep.equal(['job']);
    });
  }
});
