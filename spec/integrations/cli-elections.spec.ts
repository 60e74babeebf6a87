/** `npx monglock status` lists an election's leader, marked as an election, with the value it proclaims. Spawned processes, real output. */
import { expect } from 'chai';
import { election, writeLock } from '../../lib';
import type { ListedLock } from '../../lib/integrations/cli/lock-listing';
import { freshCollection, mongoBackend } from '../support/fixture';
import { runCli as run } from '../support/cli-process';

describe('monglock CLI: elections', function () {
  this.timeout(60_000);

  it('status lists an election\'s leader, marked as an election, with its value, token and time left', async () => {
    const collection = await freshCollection([{ _id: 'cart' }]);
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
    const term = await election({ collection, lease: 30_000 }).campaign({ _id: 'billing' }, { value: { host: 'worker-2' } });
    const plain = await writeLock({ collection, locktimeout: 30_000 }).acquire({ _id: 'cart' });
    const table = await run(['status', ...where]);
    console.log(table.out.replace(/^/gm, '      | '));
    expect(table.out).to.match(new RegExp(`billing\\s+leader \\(election\\)\\s+held\\s+\\w+\\s+${term.fence}\\s.*\\{"host":"worker-2"\\}$`, 'm'));
    expect(table.out).to.match(/cart\s+write\s+held\s.*\s-$/m);
    const rows = JSON.parse((await run(['status', ...where, '--json'])).out) as ListedLock[];
    const leader = rows.find((row) => row.target === 'billing');
    expect(leader).to.deep.include({ tag: 'leader', state: 'held', documentFence: term.fence, election: { value: { host: 'worker-2' } } });
    expect(leader?.remainingMs).to.be.above(0);
    expect(rows.find((row) => row.target === 'cart')?.election).to.equal(undefined);
    await Promise.all([term.resign(), plain.release()]);
  });
});
