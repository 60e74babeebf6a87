/** `npx monglock status` lists quarantined documents; `monglock release --doc <_id> --quarantine` clears a mark. Spawned processes, real output and exit codes. */
import { expect } from 'chai';
import { isLockError, writeLock } from '../../lib';
import type { ListedQuarantine } from '../../lib/integrations/cli/quarantine-listing';
import { freshCollection, mongoBackend, rejectionOf } from '../support/fixture';
import { runCli as run } from '../support/cli-process';

describe('monglock CLI: quarantined documents', function () {
  this.timeout(60_000);

  it('status lists live marks (table and --json) and not ended ones; release --doc --quarantine clears one after confirmation; bad calls exit 1 or 2', async () => {
    const collection = await freshCollection([{ _id: 'job-1' }, { _id: 'job-2' }, { _id: 'job-3' }]);
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
    const lock = writeLock({ collection, locktimeout: 30_000 });
    const marker = await lock.acquire({ _id: 'job-1' });
    await marker.quarantine({ reason: 'payload does not parse' });
    await (await lock.acquire({ _id: 'job-2' })).quarantine({ reason: 'ended', until: new Date(Date.now() - 60_000) });
    const held = await lock.acquire({ _id: 'job-3' });

    const table = await run(['status', ...where]);
    console.log(table.out.replace(/^/gm, '      | '));
    expect(table.code, table.err).to.equal(0);
    expect(table.out).to.match(new RegExp(`job-3\\s+write\\s+held\\s+${held.id}`));
    expect(table.out).to.match(new RegExp(`^job-1\\s+\\S+\\s+until cleared\\s+${marker.id}\\s+payload does not parse$`, 'm'));
    expect(table.out).not.to.match(/job-2/);
    const json = JSON.parse((await run(['status', ...where, '--json'])).out) as Array<Partial<Omit<ListedQuarantine, 'state'>> & { state: string; lockId?: string }>;
    expect(json.filter((row) => row.state === 'quarantined').map(({ target, reason, until, by }) => ({ target, reason, until, by }))).to.deep.equal([
      { target: 'job-1', reason: 'payload does not parse', until: null, by: marker.id },
    ]);
    expect(json.filter((row) => row.state === 'held').map((row) => row.lockId)).to.deep.equal([held.id]);

    const notConfirmed = await run(['release', ...where, '--doc', 'job-1', '--quarantine'], 'n\n');
    expect(notConfirmed.code, 'stdin is no terminal: refused without --yes').to.equal(2);
    expect(isLockError(await rejectionOf(lock.acquire({ _id: 'job-1' })), 'Quarantined')).to.equal(true);
    const cleared = await run(['release', ...where, '--doc', 'job-1', '--quarantine', '--yes']);
    expect(cleared.code, cleared.err).to.equal(0);
    expect(cleared.out).to.match(/payload does not parse/);
    expect(cleared.out).to.match(/cleared the quarantine mark of document job-1/);
    await (await lock.acquire({ _id: 'job-1' })).release();

    const none = await run(['release', ...where, '--doc', 'job-1', '--quarantine', '--yes']);
    expect([none.code, none.err]).to.deep.equal([1, 'monglock: no quarantine mark on document job-1\n']);
    const endedMark = await run(['release', ...where, '--doc', 'job-2', '--quarantine', '--yes']);
    expect(endedMark.code, 'an ended mark is cleared too').to.equal(0);
    for (const args of [['--quarantine'], ['--doc', 'job-1', '--tag', 'write', '--quarantine'], ['--id', held.id, '--quarantine']]) {
      const usage = await run(['release', ...where, ...args, '--yes']);
      expect(usage.code, args.join(' ')).to.equal(2);
    }
    expect((await run(['status', ...where])).out).not.to.match(/QUARANTINED/);
    await held.release();
  });
});
