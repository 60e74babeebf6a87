/**
 * An election's document quarantined by a writeLock holder on the same field (another tag): the
 * leader goes on leading (its renewals are no acquisitions), a campaign waiting for it settles
 * (refused Quarantined once the leader resigns, never leading while the mark lives), and one
 * started on the quarantined document settles too.
 */
import { expect } from 'chai';
import { election, isLockError, writeLock, type Term } from '../../lib';
import { freshCollection, newClient, sleep } from '../support/fixture';

describe('election on a quarantined document', function () {
  this.timeout(30_000);

  it('a waiting campaign settles (Quarantined) once the leader resigns, and never leads while the mark lives', async () => {
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000 });
    const leader = await elections.campaign({ _id: 'e' }, { value: 'a' });
    const other = election({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), lease: 1_000 });
    let led: Term | undefined;
    const waiting = other.campaign({ _id: 'e' }, { value: 'b' }).then(
      (term) => ((led = term), 'led'),
      (error: Error) => (isLockError(error, 'Quarantined') ? 'Quarantined' : `${error.name}: ${error.message}`),
    );
    const writer = writeLock({ collection, locktimeout: 5_000 });
    await (await writer.acquire({ _id: 'e' })).quarantine({ reason: 'poisoned' });
    await sleep(1_500);
    expect(leader.signal.aborted, 'the leader renews its lease beside the mark').to.equal(false);
    await leader.resign();
    const outcome = await Promise.race([waiting, sleep(5_000).then(() => 'still waiting 5 s after the resignation')]);
    await led?.resign();
    expect(outcome).to.equal('Quarantined');
    const late = await Promise.race([
      elections.campaign({ _id: 'e' }, { wait: 2_000 }).then(
        async (term) => (await term.resign(), 'led'),
        (error: Error) => (isLockError(error, 'Quarantined') ? 'Quarantined' : error.name),
      ),
      sleep(5_000).then(() => 'unsettled'),
    ]);
    expect(late).to.equal('Quarantined');
  });
});
