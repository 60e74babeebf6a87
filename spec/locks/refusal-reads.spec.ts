/**
 * What a refused acquisition by a filter that is not an `_id` equality (a job queue's) costs a
 * caller that quarantines nothing: one explaining read, as before the quarantine (on 20a91f6:
 * findAndModify, aggregate). Since 953932f the refusal is explained first from the matches without
 * a live mark, and from the filter when there is none: a worker polling an empty queue (no
 * document matches) sends two reads per poll.
 * (A first version of the quarantine skip made the empty queue's poll send findAndModify, aggregate, aggregate.)
 */
import { expect } from 'chai';
import { isLockError, writeLock } from '../../lib';
import { commandsSentBy, freshCollection } from '../support/fixture';

describe('reads of a refused acquisition by a filter that may match several documents', function () {
  this.timeout(30_000);

  it('no quarantine mark anywhere: an empty queue\'s poll and a held match are each explained by one read', async () => {
    const collection = await freshCollection([{ _id: 1, queue: 'in' }, { _id: 2, queue: 'done' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const empty = await commandsSentBy(() => lock.acquire({ queue: 'ready' }));
    expect(isLockError(empty.error, 'RessourceNotFound')).to.equal(true);
    const held = await lock.acquire({ _id: 1 });
    const busy = await commandsSentBy(() => lock.acquire({ queue: 'in' }));
    expect(isLockError(busy.error, 'LockAlreadyTaken')).to.equal(true);
    await held.release();
    expect({ empty: empty.commands, busy: busy.commands }).to.deep.equal({ empty: ['findAndModify', 'aggregate'], busy: ['findAndModify', 'aggregate'] });
  });
});
