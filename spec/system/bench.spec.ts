import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { Results } from '../../bench/report';
import { mongoBackend } from '../support/fixture';

const run = promisify(execFile);
const ROOT = join(__dirname, '..', '..');

describe('benchmark (smoke run)', () => {
  it('runs every contender and workload at every modelled majority delay, and writes the table, JSON and chart', async function () {
    this.timeout(600_000);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--smoke'], {
      cwd: ROOT,
      env: { ...process.env, MONGODB_URI: mongoBackend().uri },
      maxBuffer: 10_000_000,
    });
    expect(stdout).to.include('| library |');
    const results = JSON.parse(readFileSync(join(ROOT, '.cache', 'bench-smoke', 'results.json'), 'utf8')) as Results;
    expect(results.levels.map((level) => level.delayMs)).to.deep.equal([0, 5]);
    for (const level of results.levels) {
      const ours = level.contenders.filter((c) => c.kind === 'monglock' && c.latency !== null);
      expect(ours.map((c) => c.name)).to.have.length(7); // writeLock and writeLock fair, each with streams and polling; the folded section; multiLock; resourceLocks
      const oneWait = level.contenders.find((c) => c.name === 'monglock writeLock folded, acquire w: 1');
      expect(oneWait?.rmw?.p50, 'the folded section acquired at w: 1').to.be.greaterThan(0);
      for (const c of ours) {
        expect(c.failed, c.name).to.equal(undefined);
        expect(c.latency?.p50, c.name).to.be.greaterThan(0);
        expect(c.hot['16']?.perSecond, c.name).to.be.greaterThan(0);
        expect(c.commands?.acquire, c.name).to.equal(1);
        expect(c.commands?.release, c.name).to.equal(1);
      }
      const writeLock = ours.find((c) => c.name === 'monglock writeLock');
      expect(writeLock?.commands?.refused).to.equal(2);
      expect(writeLock?.rmw?.p50, 'the folded read-modify-write').to.be.greaterThan(0);
      expect(level.contenders.find((c) => c.kind === 'floor')?.commands).to.deep.include({ acquire: 1, release: 1, refused: null });
      expect(level.contenders.filter((c) => c.kind === 'peer').length + results.skipped.length).to.be.at.least(6);
      if (level.delayMs > 0) {
        // Majority waits counted by the proxy: monglock's acquisition waits, its plain release does not.
        expect(writeLock?.commands?.majorityWrites, 'acquire + release').to.equal(1);
        expect(level.contenders.find((c) => c.name === 'floor: findOneAndUpdate')?.commands?.majorityWrites).to.equal(2);
        expect(writeLock!.latency!.p50, 'one majority wait').to.be.at.least(level.delayMs);
      }
    }
    expect(readFileSync(join(ROOT, '.cache', 'bench-smoke', 'throughput.svg'), 'utf8')).to.match(/^<svg/);
    const level0 = results.levels[0]!;
    console.log(`      peers measured: ${level0.contenders.filter((c) => c.kind === 'peer' && !c.failed).map((c) => c.name).join(', ')}`);
    for (const reason of results.skipped) console.log(`      not measured: ${reason.slice(0, 160)}`);
  });
});

describe('semaphore benchmark (small run)', () => {
  it('measures every contender in one process and across four, never more than 4 holders at once', async function () {
    this.timeout(300_000);
    await run(process.execPath, ['--import', 'tsx', 'bench/semaphore.ts', '--small'], { cwd: ROOT, env: { ...process.env, MONGODB_URI: mongoBackend().uri }, maxBuffer: 10_000_000 });
    const results = JSON.parse(readFileSync(join(ROOT, '.cache', 'bench-semaphore', 'semaphore.json'), 'utf8')) as {
      rows: Array<{ contender: string; processes: number; perSecond: number[]; mostAtOnce: number; commandsPerSection: number[] }>;
    };
    expect(results.rows.map((row) => `${row.contender} ${row.processes}`)).to.have.length(6);
    for (const row of results.rows) {
      expect(row.perSecond[0], row.contender).to.be.greaterThan(0);
      expect(row.mostAtOnce, row.contender).to.be.within(1, 4);
      expect(row.commandsPerSection[0], row.contender).to.be.at.least(2);
    }
  });
});

describe('transfer benchmark (smoke run)', () => {
  it('moves money with every contender at L = 0 and 5 ms, in one process and across four: conserved, one holder per account, the commands and majority waits of each', async function () {
    this.timeout(300_000);
    // The run itself fails (and so does this) when money is not conserved or an account had two holders at once.
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/transfer.ts', '--smoke'], { cwd: ROOT, env: { ...process.env, MONGODB_URI: mongoBackend().uri }, maxBuffer: 10_000_000 });
    expect(stdout).to.include('**Transfers per second**');
    type Counts = { acquire: number; commit: number; release: number; other: number };
    const results = JSON.parse(readFileSync(join(ROOT, '.cache', 'bench-transfer-smoke', 'transfer.json'), 'utf8')) as {
      conserved: boolean;
      rows: Array<{ contender: string; delayMs: number; processes: number; transfers: number[]; commands: Counts[]; majority: number[]; mostAtOnce: number }>;
      uncontended: Array<{ contender: string; delayMs: number; p50Ms: number; commands: Counts; majority: number }>;
    };
    expect(results.conserved).to.equal(true);
    expect(results.rows).to.have.length(5 * 2 * 2);
    for (const row of results.rows) {
      const where = `${row.contender}, L = ${row.delayMs}, ${row.processes} process(es)`;
      // Transfers made, warm-up included: on a loaded machine none may end inside a 0.4 s smoke window (its rate is then 0).
      expect(row.transfers[0], `${where}: transfers made`).to.be.at.least(1);
      expect(row.mostAtOnce, `${where}: the most transfers holding one account at once`).to.equal(1);
      expect(row.commands[0]!.acquire, `${where}: acquisition commands per transfer`).to.be.at.least(2);
      expect(row.commands[0]!.commit, `${where}: one commit or update per document`).to.be.closeTo(2, 1e-9);
      expect(row.commands[0]!.other, `${where}: every command belongs to a transfer`).to.equal(0);
      expect(row.majority[0], `${where}: majority waits per transfer`).to.be.at.least(4);
    }
    // Uncontended: one acquisition and one commit or update per document; a plain release is sent at w: 1 by monglock only.
    const expected: Record<string, { release: number; majority: number; serialWaits: number }> = {
      'monglock usingAll + commitAll': { release: 0, majority: 4, serialWaits: 4 },
      'monglock acquireAll + guarded updates': { release: 2, majority: 4, serialWaits: 3 },
      'monglock writeLock ×2, sorted': { release: 0, majority: 4, serialWaits: 3 },
      'mongo-locks (coyotte508) ×2': { release: 2, majority: 6, serialWaits: 4 },
      'mongo-lock (andrasq) ×2, w: majority': { release: 2, majority: 6, serialWaits: 4 },
    };
    expect(results.uncontended).to.have.length(5 * 2);
    for (const u of results.uncontended) {
      const want = expected[u.contender]!;
      expect(u.commands, u.contender).to.deep.equal({ acquire: 2, commit: 2, release: want.release, other: 0 });
      expect(u.majority, u.contender).to.equal(want.majority);
      if (u.delayMs > 0) expect(u.p50Ms, `${u.contender}: majority waits one after another`).to.be.at.least(want.serialWaits * u.delayMs);
    }
  });
});
