import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import type { ContenderResult } from './report';

/** What the Go peers gave: results, or why they could not run. */
export interface GoOutcome {
  readonly results: ContenderResult[];
  readonly skipped: string[];
}

const HARNESSES = [{ dir: 'square', module: 'github.com/square/mongo-lock' }];
const NOT_BUILT = ['github.com/foomo/mongo-lock: no harness yet (same API as square/mongo-lock on driver v2)'];

/**
 * Builds and runs the Go harness of each Go peer (`bench/go/<name>`, `go mod tidy && go build`,
 * modules from the Go module proxy). A peer that cannot be built or run is skipped with the reason.
 */
export async function runGoPeers(uri: string, smoke: boolean): Promise<GoOutcome> {
  const results: ContenderResult[] = [];
  const skipped = [...NOT_BUILT];
  // A smoke run checks the harness end to end in seconds; building the Go peers (go mod tidy asks the module proxy) is left to real runs.
  if (smoke) return { results, skipped: [...skipped, ...HARNESSES.map((h) => `${h.module}: not built in a smoke run`)] };
  if (spawnSync('go', ['version']).status !== 0) {
    return { results, skipped: [...skipped, ...HARNESSES.map((h) => `${h.module}: Go is not installed`)] };
  }
  for (const harness of HARNESSES) {
    const dir = join(__dirname, 'go', harness.dir);
    const binary = join(__dirname, '..', '.cache', `bench-go-${harness.dir}`);
    const build = spawnSync('sh', ['-c', `go mod tidy && go build -o ${JSON.stringify(binary)} .`], { cwd: dir, encoding: 'utf8', timeout: 300_000 });
    if (build.status !== 0) {
      const reason = `${build.stderr ?? ''}${build.stdout ?? ''}`.split('\n').filter((line) => line.trim()).slice(-2).join(' ').slice(0, 300);
      skipped.push(`${harness.module}: could not be built here (${reason || build.error?.message || 'unknown'})`);
      continue;
    }
    const args = smoke ? ['-rounds', '1', '-iterations', '30', '-hot-ms', '250', '-many', '200', '-many-workers', '8'] : [];
    const run = spawnSync(binary, ['-uri', uri, ...args], { encoding: 'utf8', timeout: 1_800_000 });
    if (run.status !== 0) {
      skipped.push(`${harness.module}: the harness failed (${(run.stderr ?? '').slice(0, 300)})`);
      continue;
    }
    results.push(JSON.parse(run.stdout) as ContenderResult);
  }
  return { results, skipped };
}
