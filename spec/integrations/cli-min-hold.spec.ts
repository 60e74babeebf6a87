/** `npx monglock status` shows a lock released before its minimum hold ended as kept, and `release` ends the minimum hold. Spawned processes, real output. */
import { expect } from 'chai';
import { semaphore, writeLock } from '../../lib';
import type { ListedLock } from '../../lib/integrations/cli/lock-listing';
import { freshCollection, mongoBackend } from '../support/fixture';
import { runCli as run } from '../support/cli-process';

describe('monglock CLI: minimum holds', function () {
  this.timeout(60_000);

  it('status shows a lock released before its minimum hold ended as kept (a rate limit\'s window too); release --doc --tag removes it, ending the minimum hold', async () => {
    const collection = await freshCollection([{ _id: 'job' }, { _id: 'api' }]);
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
    const jobs = writeLock({ collection, locktimeout: 30_000 });
    const ran = await jobs.acquire({ _id: 'job' }, { minHold: 20_000 });
    await ran.release();
    await (await semaphore({ collection, limit: 3, locktimeout: 30_000 }).acquire({ _id: 'api' }, { minHold: 20_000 })).release();
    const rows = JSON.parse((await run(['status', ...where, '--json'])).out) as ListedLock[];
    expect(rows.map((row) => [row.target, row.state, row.lockId])).to.deep.equal([
      ['job', 'kept', `${ran.id}:kept`],
      ['api', 'kept', rows[1]!.lockId],
    ]);
    expect(rows[1]!.permits).to.deep.equal({ taken: 1, used: 1, limit: 3, window: 20_000 });
    const released = await run(['release', ...where, '--doc', 'job', '--tag', 'write', '--yes']);
    expect(released.out, released.err).to.match(/released 1 lock\(s\)/);
    await (await jobs.acquire({ _id: 'job' })).release();
  });
});
