/**
 * The project's performance targets, judged from a run's results (results.json) by code, never by
 * hand: `renderTargets(results)` is the table that `npm run bench` writes to targets.md beside
 * results.md. `npx tsx bench/targets.ts [dir]` re-derives it from the results.json in `dir`
 * (default bench/results), for a run made before this file existed.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { peersOf, type ContenderResult, type LevelResults, type Results } from './report';

/** One target at one level: what was measured against what it must be. */
export interface TargetVerdict {
  readonly target: string;
  readonly delayMs: number;
  readonly measured: string;
  readonly met: boolean | undefined;
}

const named = (level: LevelResults, name: string): ContenderResult | undefined => level.contenders.find((c) => c.name === name && !c.failed);
const hot16 = (contender: ContenderResult | undefined): number | undefined => contender?.hot['16']?.perSecond;
const verdict = (target: string, delayMs: number, value: number | undefined, bound: number | undefined, holds: (value: number, bound: number) => boolean, unit: string): TargetVerdict =>
  value === undefined || bound === undefined
    ? { target, delayMs, measured: 'not measured', met: undefined }
    : { target, delayMs, measured: `${value.toFixed(unit === '×' ? 2 : 1)}${unit} (bound ${bound.toFixed(unit === '×' ? 2 : 1)}${unit})`, met: holds(value, bound) };

/** Every target at the levels it applies to. */
export function judgeTargets(results: Results): TargetVerdict[] {
  const verdicts: TargetVerdict[] = [];
  for (const level of results.levels) {
    const L = level.delayMs;
    const floor = named(level, 'floor: findOneAndUpdate');
    const lock = named(level, 'monglock writeLock');
    const fair = named(level, 'monglock writeLock fair');
    const folded = named(level, 'monglock writeLock folded, acquire w: 1');
    const peers = peersOf(level);
    const bestHot = Math.max(0, ...peers.map((p) => hot16(p) ?? 0)) || undefined;
    const rmws = peers.map((p) => p.rmw?.p50).filter((v): v is number => v !== undefined);
    const bestRmw = rmws.length > 0 ? Math.min(...rmws) : undefined;
    const aPlusR = lock?.latency && floor?.latency ? lock.latency.p50 / floor.latency.p50 : undefined;
    if (L === 5) verdicts.push(verdict('acquire + release ≤ 0.7× the floor', L, aPlusR, 0.7, (v, b) => v <= b, '×'));
    if (L === 0) verdicts.push(verdict('acquire + release ≤ 1.15× the floor', L, aPlusR, 1.15, (v, b) => v <= b, '×'));
    const hotRatio = hot16(lock) !== undefined && bestHot ? hot16(lock)! / bestHot : undefined;
    verdicts.push(verdict('hot document ×16 ≥ the best safe peer', L, hotRatio, 1, (v, b) => v >= b, '×'));
    if (L === 5) {
      verdicts.push(verdict('read-modify-write ≤ 0.6× the best safe peer (default write concerns)', L, lock?.rmw && bestRmw ? lock.rmw.p50 / bestRmw : undefined, 0.6, (v, b) => v <= b, '×'));
      verdicts.push(verdict('read-modify-write ≤ 0.6× the best safe peer (acquired at w: 1)', L, folded?.rmw && bestRmw ? folded.rmw.p50 / bestRmw : undefined, 0.6, (v, b) => v <= b, '×'));
    }
    const fairRatio = hot16(fair) !== undefined && hot16(lock) ? hot16(fair)! / hot16(lock)! : undefined;
    verdicts.push(verdict('fair mode ≥ 0.9× the non-fair throughput (hot ×16)', L, fairRatio, 0.9, (v, b) => v >= b, '×'));
    // 16 sections ahead of and including the worst-off waiter (each 1/throughput long on average), plus two round trips (an uncontended acquire + release of the floor).
    const fairSection = hot16(fair) ? 1000 / hot16(fair)! : undefined;
    const waitBound = fairSection !== undefined && floor?.latency ? 16 * fairSection + floor.latency.p50 : undefined;
    verdicts.push(verdict("fair mode's worst wait ×16 ≤ 16 sections + 2 round trips", L, fair?.hot['16']?.worstWait, waitBound, (v, b) => v <= b, ' ms'));
  }
  return verdicts;
}

/** The targets table, for targets.md. */
export function renderTargets(results: Results): string {
  const lines = [
    '# Targets',
    '',
    `Judged by bench/targets.ts from the run of ${results.date} (${results.backend}; ${results.machine}), the one in results.md.`,
    '',
    '| target | L (ms) | measured (bound) | met |',
    '|---|---|---|---|',
    ...judgeTargets(results).map((v) => `| ${v.target} | ${v.delayMs} | ${v.measured} | ${v.met === undefined ? '–' : v.met ? 'yes' : 'no'} |`),
    '',
  ];
  return lines.join('\n');
}

if (require.main === module) {
  const dir = process.argv[2] ?? join(__dirname, 'results');
  const results = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as Results;
  const table = renderTargets(results);
  writeFileSync(join(dir, 'targets.md'), table);
  console.log(table);
}
