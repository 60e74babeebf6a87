/**
 * `monglock release` asks before it releases, and releases what it showed: the locks it listed,
 * never what their lock id holds by the time the operator answers. Run end to end in a terminal
 * (a pseudo-terminal from util-linux `script`), answering the real prompt.
 */
import { spawn, spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect } from 'chai';
import { resourceLocks, writeLock, type ResourceLocks } from '../../lib';
import { runCli } from '../support/cli-process';
import { freshCollection, mongoBackend, sleep } from '../support/fixture';

const ROOT = resolve(__dirname, '..', '..');

/** Why a pseudo-terminal cannot be had here (no util-linux `script`), or undefined. */
function noTerminal(): string | undefined {
  const probe = spawnSync('script', ['--version'], { encoding: 'utf8' });
  return probe.status === 0 && /util-linux/.test(probe.stdout) ? undefined : 'util-linux `script` (for a pseudo-terminal) is not installed';
}

const quoted = (word: string): string => `'${word.replace(/'/g, `'\\''`)}'`;

/**
 * Runs the CLI with a terminal on stdin; when it asks its question, runs `meanwhile` (what other
 * processes do while the operator reads), then answers `y`. Resolves its exit code and what it
 * printed (stdout and stderr, as the terminal showed them).
 */
function answerYes(args: string[], meanwhile: () => Promise<void>): Promise<{ code: number | null; asked: boolean; output: string }> {
  const command = [process.execPath, '--import', 'tsx', 'lib/cli.ts', ...args].map(quoted).join(' ');
  return new Promise((done, fail) => {
    // A process group of its own: a hung CLI is killed with `script` (node and tsx under it), not left behind.
    const child = spawn('script', ['-q', '-e', '-c', command, '/dev/null'], { cwd: ROOT, env: { ...process.env, MONGODB_URI: undefined }, detached: true });
    let output = '';
    let asked = false;
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (asked || !/\[y\/N\] /.test(output)) return;
      asked = true;
      meanwhile().then(() => child.stdin.write('y\r'), fail);
    });
    const killer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 30_000); // a hung CLI never outlives the test
    child.once('exit', (code) => {
      clearTimeout(killer);
      child.stdin.end();
      // eslint-disable-next-line no-control-regex
      done({ code, asked, output: output.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '').replace(/\r/g, '') });
    });
  });
}

/** The resources lock id `lockId` holds now, by the library's own status. */
async function heldBy(locks: ResourceLocks, lockId: string): Promise<string[]> {
  return (await locks.status({ lockId })).map((status) => status.resource).sort();
}

describe('monglock release: only what it showed', function () {
  this.timeout(60_000);

  before(function () {
    const reason = noTerminal();
    if (reason) {
      console.log(`      skipped: ${reason}`);
      this.skip();
    }
  });

  it('release --resources --id: a lock the id took after the listing (another resource, or the same one re-taken) stays held, and nothing released exits 1 saying why', async () => {
    const collection = await freshCollection();
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName, '--resources'];
    const locks = resourceLocks({ collection });
    const shown = await locks.xlock('stage-1', 'job-7', { owner: 'pipeline', ttl: 60_000 });

    const run = await answerYes(['release', ...where, '--id', 'job-7'], async () => {
      // While the operator reads, the job moves on under the same id: stage-1 is let go, stage-2 taken, stage-1 taken again.
      await shown.release();
      await locks.xlock('stage-2', 'job-7', { owner: 'pipeline', ttl: 60_000 });
      await locks.xlock('stage-1', 'job-7', { owner: 'pipeline', ttl: 60_000 });
    });
    console.log(run.output.replace(/^/gm, '      | '));

    expect(run.asked, `the CLI asked before releasing: ${run.output}`).to.equal(true);
    expect(run.output, 'the lock shown was listed').to.match(/stage-1\s+exclusive\s+held\s+job-7\s/);
    expect(await heldBy(locks, 'job-7'), 'locks job-7 took after the listing, which the operator never saw, were released').to.deep.equal(['stage-1', 'stage-2']);
    expect(run.code, `released nothing, yet exited ${run.code}: ${run.output}`).to.equal(1);
    expect(run.output, 'says what happened').to.match(/nothing released: the lock shown was let go before the confirmation/);
    expect(run.output, 'names the locks left held').to.match(/lock id job-7 now holds 2 lock\(s\) taken after the listing, left held: stage-1 exclusive, stage-2 exclusive/);
  });

  it('release --resources --id: the lock shown let go before the answer, nothing released: exit 1, "nothing released"', async () => {
    const collection = await freshCollection();
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName, '--resources'];
    const shown = await resourceLocks({ collection }).xlock('report', 'job-9', { ttl: 60_000 });

    const run = await answerYes(['release', ...where, '--id', 'job-9'], () => shown.release());
    console.log(run.output.replace(/^/gm, '      | '));

    expect(run.code, `released nothing, yet exited ${run.code}: ${run.output}`).to.equal(1);
    expect(run.output, 'says what happened').to.match(/monglock: nothing released: the lock shown was let go before the confirmation\n/);
  });

  it('release --resources --id: of two locks shown, one let go meanwhile, the other is released; exit 0, saying one was let go', async () => {
    const collection = await freshCollection();
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName, '--resources'];
    const locks = resourceLocks({ collection });
    const first = await locks.xlock('a', 'job-8', { ttl: 60_000 });
    await locks.slock('b', 'job-8', { ttl: 60_000 });

    const run = await answerYes(['release', ...where, '--id', 'job-8'], () => first.release());
    console.log(run.output.replace(/^/gm, '      | '));

    expect(run.code, run.output).to.equal(0);
    expect(await heldBy(locks, 'job-8'), 'the lock shown and still held was released').to.deep.equal([]);
    expect(run.output, 'counts what it released').to.match(/released 1 resource lock\(s\)/);
    expect(run.output, 'says the other was let go').to.match(/1 of the 2 locks shown had been let go before the confirmation/);
  });

  it('release --doc --tag: an entry whose lease ended is not listed nor counted as released (it holds nothing); a lock whose lease ends before the confirmation was let go, not released', async () => {
    const collection = await freshCollection([{ _id: 'a' }, { _id: 'b' }]);
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
    await writeLock({ collection, locktimeout: 200 }).acquire({ _id: 'a' });
    await sleep(400);
    const expired = await runCli(['release', ...where, '--doc', 'a', '--tag', 'write', '--yes']);
    expect(expired.out, 'an expired entry shown or counted').not.to.match(/released 1|expired/);
    expect({ code: expired.code, err: expired.err }).to.deep.equal({ code: 1, err: 'monglock: no write lock on document a\n' });

    const short = await writeLock({ collection, locktimeout: 2_000 }).acquire({ _id: 'b' });
    const run = await answerYes(['release', ...where, '--doc', 'b', '--tag', 'write'], () => sleep(Math.max(0, short.expiresAt - Date.now()) + 300));
    console.log(run.output.replace(/^/gm, '      | '));
    expect(run.output, 'listed while it was held').to.match(new RegExp(`b\\s+write\\s+held\\s+${short.id}`));
    expect(run.output, 'says what happened').to.match(/nothing released: the lock shown was let go before the confirmation/);
    expect(run.code, run.output).to.equal(1);
  });
});
