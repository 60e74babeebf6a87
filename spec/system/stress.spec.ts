import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { StressReport } from '../../stress/run';
import { mongoBackend } from '../support/fixture';

const run = promisify(execFile);

describe('stress (small mode): several processes, every lock kind, an independent checker', () => {
  it('never two holders at once, fencing tokens strictly increasing, no lost update, never more permits than a semaphore\'s limit', async function () {
    this.timeout(180_000);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', join('stress', 'run.ts'), '--small'], {
      cwd: join(__dirname, '..', '..'),
      env: { ...process.env, MONGODB_URI: mongoBackend().uri },
      maxBuffer: 10_000_000,
    });
    const report = JSON.parse(stdout.trim().split('\n').at(-1)!) as StressReport;
    console.log(`      ${report.sections} critical sections by ${report.processes} processes x ${report.workersPerProcess} workers ${JSON.stringify(report.byKind)}, ${report.handOvers} hand-overs`);
    expect(report.sections).to.be.greaterThan(100);
    // Every kind ran (how many each depends on the machine's load: 41 to 470 in 6 s).
    for (const [kind, count] of Object.entries(report.byKind)) expect(count, kind).to.be.greaterThan(10);
    expect({
      overlaps: report.overlaps,
      fenceRegressions: report.fenceRegressions,
      rejectedWrites: report.rejectedWrites,
      lostUpdates: report.lostUpdates,
      permitsOverLimit: report.permitsOverLimit,
    }).to.deep.equal({ overlaps: 0, fenceRegressions: 0, rejectedWrites: 0, lostUpdates: 0, permitsOverLimit: 0 });
    expect(report.mostPermits, 'never more than the limit (3)').to.be.within(1, 3);
    // The hot document (every worker of every process) was handed over within processes, and the checker judged those sections too.
    expect(report.handOvers, 'hand-overs').to.be.greaterThan(0);
  });
});
