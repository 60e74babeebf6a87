/**
 * `npm run demo`, small: worker processes lock accounts with `document` and `commit`, the demo's
 * observer (independent of the lock) finds every invariant held, and no process the demo started
 * outlives it, also when it is interrupted.
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { mongoBackend } from '../support/fixture';

const run = promisify(execFile);
const ROOT = join(__dirname, '..', '..');
const DEMO = ['--import', 'tsx', 'demo/demo.ts'];

const demoEnv = (requests: number): NodeJS.ProcessEnv => ({
  ...process.env,
  MONGLOCK_BACKEND: 'uri',
  MONGODB_URI: mongoBackend().uri,
  DEMO_REQUESTS: String(requests),
  DEMO_CLIENTS: '16',
  DEMO_WORKERS: '2',
});

/** The worker pids the demo announces once they listen. */
function workerPids(stdout: string): number[] {
  const listed = /pids ([\d, ]+)\) ready/.exec(stdout)?.[1] ?? '';
  return listed.split(', ').filter(Boolean).map(Number);
}

/** True while process group `pid` (a worker and what it started) has a process. */
function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

describe('the demo (npm run demo)', () => {
  it('runs a small load over two worker processes and reports every invariant held', async function () {
    this.timeout(120_000);
    const { stdout } = await run(process.execPath, DEMO, { cwd: ROOT, env: demoEnv(300) });
    expect(stdout).to.match(/\| most handlers inside one document at once +\| 1 \|/);
    expect(stdout).to.match(/\| fencing tokens strictly increasing +\| yes \|/);
    expect(stdout).to.match(/\| operations landed \/ answered 200 +\| (\d+) \/ \1 \|/);
    expect(stdout).to.match(/\| sum of balances \/ what the 200s moved +\| (-?\d+) \/ \1 \|/);
    expect(stdout).to.match(/\| errors +\| 0 \|/);
    expect(stdout).to.match(/\| worker process trees left running +\| 0 \|/);
    expect(stdout).to.include('All invariants held.');
    const pids = workerPids(stdout);
    expect(pids).to.have.length(2);
    if (process.platform !== 'win32') expect(pids.filter(groupAlive)).to.deep.equal([]);
  });

  it('interrupted (SIGINT), stops every worker process tree and exits 130', async function () {
    if (process.platform === 'win32') this.skip(); // no process groups to check
    this.timeout(120_000);
    const demo = spawn(process.execPath, DEMO, { cwd: ROOT, env: demoEnv(1_000_000), stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(demo, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    let stdout = '';
    let stderr = '';
    demo.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await new Promise<void>((resolve, reject) => {
      demo.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (/[1-9]\d*\/1000000 answered/.test(stdout)) resolve(); // the workers answer requests
      });
      void exited.then(() => reject(new Error(`the demo exited before it sent requests:\n${stdout}\n${stderr}`)));
    });
    const pids = workerPids(stdout);
    expect(pids.filter(groupAlive)).to.have.length(2);
    demo.kill('SIGINT');
    const [code] = await exited;
    expect({ code, stderr }).to.deep.include({ code: 130 });
    expect(pids.filter(groupAlive)).to.deep.equal([]);
  });
});
