import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { Results } from '../bench/report';
import { mongoBackend } from './support/fixture';

const run = promisify(execFile);
const ROOT = join(__dirname, '..');

describe('benchmark (smoke run)', () => {
  it('runs every contender and workload on the test backend and writes the table, JSON and chart', async function () {
    this.timeout(300_000);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--smoke'], {
      cwd: ROOT,
      env: { ...process.env, MONGODB_URI: mongoBackend().uri },
      maxBuffer: 10_000_000,
    });
    expect(stdout).to.include('| library |');
    const results = JSON.parse(readFileSync(join(ROOT, '.cache', 'bench-smoke', 'results.json'), 'utf8')) as Results;
    const ours = results.contenders.filter((c) => c.kind === 'monglock');
    expect(ours.map((c) => c.name)).to.have.length(4);
    for (const c of ours) {
      expect(c.failed, c.name).to.equal(undefined);
      expect(c.latency?.p50, c.name).to.be.greaterThan(0);
      expect(c.hot['16']?.perSecond, c.name).to.be.greaterThan(0);
      expect(c.commands?.acquire, c.name).to.equal(1);
      expect(c.commands?.release, c.name).to.equal(1);
    }
    expect(ours.find((c) => c.name === 'monglock writeLock')?.commands?.refused).to.equal(2);
    expect(results.contenders.find((c) => c.kind === 'floor')?.commands).to.deep.equal({ acquire: 1, release: 1, refused: null });
    expect(results.contenders.filter((c) => c.kind === 'peer').length + results.skipped.length).to.be.at.least(5);
    expect(readFileSync(join(ROOT, '.cache', 'bench-smoke', 'throughput.svg'), 'utf8')).to.match(/^<svg/);
    console.log(`      peers measured: ${results.contenders.filter((c) => c.kind === 'peer' && !c.failed).map((c) => c.name).join(', ')}`);
    for (const reason of results.skipped) console.log(`      not measured: ${reason.slice(0, 160)}`);
  });
});
