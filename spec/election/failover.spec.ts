import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { election } from '../../lib';
import { MAX_RETRY_DELAY } from '../../lib/waiting/wait-options';
import { lineQueue } from '../support/child-lines';
import { freshCollection, mongoBackend } from '../support/fixture';

const ROOT = join(__dirname, '..', '..');
/** The leader processes started by the current test. */
const started: ChildProcessWithoutNullStreams[] = [];

/** Starts a leader process (stress/leader.ts) and resolves once it leads. */
async function startLeader(dbName: string, collectionName: string, name: string, leaseMs: number): Promise<{ child: ChildProcessWithoutNullStreams; fence: number; nextLine: () => Promise<string> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join('stress', 'leader.ts'), mongoBackend().uri, dbName, collectionName, name, String(leaseMs)], { cwd: ROOT });
  child.stderr.on('data', (chunk: Buffer) => process.stderr.write(chunk));
  started.push(child);
  const nextLine = lineQueue(child);
  const message = JSON.parse(await nextLine()) as { event: string; fence: number };
  expect(message.event).to.equal('leading');
  return { child, fence: message.fence, nextLine };
}

describe('election failover (leaders in their own processes)', function () {
  this.timeout(60_000);
  // A leader process a failed test left behind (waiting on its stdin) is killed.
  afterEach(() => {
    for (const child of started.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  it('a leader killed with SIGKILL is replaced once its lease ends, within the lease plus one wake-up, with a greater token', async () => {
    const collection = await freshCollection();
    const lease = 1_000;
    const elections = election({ collection, lease });
    const { child, fence } = await startLeader(collection.dbName, collection.collectionName, 'job', lease);
    const before = await elections.leader({ _id: 'job' });
    expect(before?.fence).to.equal(fence);
    const campaigning = elections.campaign({ _id: 'job' }, { value: 'successor' });
    child.kill('SIGKILL');
    const killedAt = performance.now();
    await new Promise((resolve) => child.once('exit', resolve));
    const term = await campaigning;
    const took = performance.now() - killedAt;
    const now = await elections.leader({ _id: 'job' });
    console.log(`      lease ${lease} ms; the successor led ${Math.round(took)} ms after the kill`);
    expect(term.fence).to.be.above(fence);
    expect(now?.value).to.equal('successor');
    expect(took, 'within the lease plus one wake-up').to.be.below(lease + MAX_RETRY_DELAY + 500);
    await term.resign();
  });

  it('a paused leader (SIGSTOP) is replaced; once it runs again its signal aborts at its first timer, its remaining() is ≤ 0 and its guarded write matches nothing', async () => {
    const collection = await freshCollection();
    const lease = 800;
    const elections = election({ collection, lease });
    const { child, fence, nextLine } = await startLeader(collection.dbName, collection.collectionName, 'job', lease);
    child.kill('SIGSTOP');
    const term = await elections.campaign({ _id: 'job' }, { value: 'successor' });
    expect(term.fence).to.be.above(fence);
    child.kill('SIGCONT');
    child.stdin.write('go\n');
    const resumed = JSON.parse(await nextLine()) as { abortedAtFirstTimer: boolean; remaining: number; guardedMatched: number };
    expect(resumed).to.deep.include({ abortedAtFirstTimer: true, guardedMatched: 0 });
    expect(resumed.remaining).to.be.at.most(0);
    expect((await collection.findOne({ _id: 'job' as never }))?.writtenBy).to.equal(undefined);
    expect((await elections.leader({ _id: 'job' }))?.value).to.equal('successor');
    await new Promise((resolve) => child.once('exit', resolve));
    await term.resign();
  });
});
