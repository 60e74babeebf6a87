import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { ScaleResults } from '../../bench/scale-report';
import type { HeldRow, ProcessesRow, WaitersRow } from '../../bench/scale-scenarios';
import { mongoBackend } from '../support/fixture';

const run = promisify(execFile);
const ROOT = join(__dirname, '..', '..');
const OUT = join(ROOT, '.cache', 'bench-scale-quick');

/**
 * The quick run of `bench:scale` (worker processes of their own, on the suite's backend): what must
 * hold whatever the load of the machine, before and after the work on load (issue 39) — counts and
 * outcomes, never rates.
 */
describe('load as the crowd grows (bench:scale --quick)', () => {
  let results: ScaleResults;
  const rows = <R extends ScaleResults['rows'][number]>(scenario: R['scenario']): R[] => results.rows.filter((row): row is R => row.scenario === scenario);

  before(async function () {
    this.timeout(240_000);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/scale.ts', '--quick', '--out', OUT], {
      cwd: ROOT,
      env: { ...process.env, MONGODB_URI: mongoBackend().uri, MONGLOCK_BACKEND: 'uri' },
      maxBuffer: 10_000_000,
    });
    expect(stdout).to.include('## Waiters per process').and.include('## Held locks per process').and.include('## Processes per collection');
    results = JSON.parse(readFileSync(join(OUT, 'scale.json'), 'utf8')) as ScaleResults;
  });

  it('100 waiters of one process, streams on and off: every one acquires once the documents are released, none fails', () => {
    const waiters = rows<WaitersRow>('waiters');
    expect(waiters.map((row) => `${row.n} ${row.streams}`)).to.deep.equal(['100 true', '100 false']);
    for (const row of waiters) {
      const where = `streams ${row.streams ? 'on' : 'off'}`;
      expect({ acquired: row.acquired, failed: row.failed, errors: row.errors }, where).to.deep.equal({ acquired: 100, failed: 0, errors: [] });
      expect(row.releaseToLastMs, `${where}: the last acquisition came after the first release`).to.be.a('number').and.at.least(0);
      // With streams the waiting process reads its change stream; without, it opens none.
      if (row.streams) expect(row.window.getMores, `${where}: getMores in the window`).to.be.at.least(1);
      else expect({ getMores: row.window.getMores, gap: row.longestGetMoreGapMs }, where).to.deep.equal({ getMores: 0, gap: null });
    }
  });

  // A 10 s lease, not 2 s: 300 acquisitions sent at once queue behind each other, and each one's
  // round trip counts against its lease; on a loaded machine (load 7 on 2 cores) 120 of 300 leases
  // of 2 s ended before their first extension could land, on the code before issue 39.
  it('300 using() bodies at a 10 s lease held 6 s: none fails, none is lost, every lease is extended', () => {
    const [held] = rows<HeldRow>('held');
    expect(held).to.include({ n: 300, leaseMs: 10_000, holdMs: 6000, acquired: 300, failed: 0, lost: 0, releaseFailed: 0 });
    expect(held!.errors.concat(held!.lostReasons)).to.deep.equal([]);
    // Each lease is extended once half of it is left, 5 s after its acquisition at the latest: an
    // extension of every lock was sent in the 6 s window (its reply may land after it on a loaded machine).
    expect(held!.window.statements, 'write statements sent in the hold').to.be.at.least(300);
  });

  it('2 processes waiting beside a worker: each acquires its own document once released, the worker never fails', () => {
    const [processes] = rows<ProcessesRow>('processes');
    expect(processes).to.include({ p: 2, streams: true, acquiredAfterRelease: 2, workerFailed: 0 });
    expect(processes!.errors.concat(processes!.workerErrors)).to.deep.equal([]);
    expect(processes!.waiting).to.have.length(2);
    expect(processes!.worker.commands.findAndModify, "the worker's acquisitions in the window").to.be.at.least(1);
  });

  it('names the backend it ran on, and the commit', () => {
    expect(results.server).to.equal(mongoBackend().server);
    expect(results.backend).to.include(mongoBackend().version);
    expect(results.commit).to.match(/^[0-9a-f]{7,} \(lib\/ as of [0-9a-f]{7,}/);
  });
});

describe('bench:scale flags', () => {
  it('refuses an unknown flag with exit 2, naming it, before starting anything', async function () {
    this.timeout(60_000);
    const failure = await run(process.execPath, ['--import', 'tsx', 'bench/scale.ts', '--sizez', '100'], { cwd: ROOT }).then(
      () => undefined,
      (error: { code: number; stderr: string }) => error,
    );
    expect(failure?.code).to.equal(2);
    expect(failure?.stderr).to.include('"--sizez"');
  });

  it('bench:stream-cost refuses an unknown flag or a value that is not a whole number, with exit 2, naming it, before starting anything', async function () {
    this.timeout(60_000);
    for (const [args, named] of [[['--round', '5'], '"--round"'], [['--sections', 'many'], '"many"']] as const) {
      const failure = await run(process.execPath, ['--import', 'tsx', 'bench/stream-cost.ts', ...args], { cwd: ROOT }).then(
        () => undefined,
        (error: { code: number; stderr: string }) => error,
      );
      expect(failure?.code, args.join(' ')).to.equal(2);
      expect(failure?.stderr, args.join(' ')).to.include(named);
    }
  });
});
