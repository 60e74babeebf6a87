/**
 * The project's performance targets, judged by code from the committed results, never by hand:
 * hot.json (`npm run bench:hot`), uncontended.json (`npm run bench:uncontended`) and results.json
 * (`npm run bench`). Each of those benches rewrites targets.md in its output directory when it is
 * done; `npx tsx bench/targets.ts [dir]` re-derives it from the files in `dir` (default
 * bench/results). Ratios are of medians (each figure's median over its rounds).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { median } from './harness';
import { peersOf, type Results } from './report';

/** One target at one level: what was measured against what it must be. */
export interface TargetVerdict {
  readonly target: string;
  readonly delayMs: number;
  readonly measured: string;
  readonly met: boolean | undefined;
  /** The results file it was judged from. */
  readonly source: string;
}

/** hot.json, as bench/hot-processes.ts writes it. */
interface HotFile {
  readonly date: string;
  readonly levels: ReadonlyArray<{
    readonly delay: number;
    readonly figures: ReadonlyArray<{ readonly contender: string; readonly layout: string; readonly perSecond: number[]; readonly fairness: number[]; readonly worstWait: number[] }>;
  }>;
}

/** uncontended.json, as bench/uncontended.ts writes it: each contender's p50 per round, ms. */
interface UncontendedFile {
  readonly date: string;
  readonly levels: ReadonlyArray<{ readonly delay: number; readonly p50: Record<string, number[]> }>;
}

const MONGLOCK = 'monglock writeLock';
const FAIR = 'monglock writeLock fair';
const EXACT_FLOOR = "floor: monglock's exact commands";
const PLAIN_FLOOR = 'floor: findOneAndUpdate';

const at = <T>(value: T | undefined | null, bound: number, holds: (value: number, bound: number) => boolean, unit: '×' | ' ms' | '', measure: (value: T) => number | undefined) => {
  const measured = value === undefined || value === null ? undefined : measure(value);
  const digits = unit === ' ms' ? 1 : 2;
  return measured === undefined ? { measured: 'not measured', met: undefined } : { measured: `${measured.toFixed(digits)}${unit} (bound ${bound.toFixed(digits)}${unit})`, met: holds(measured, bound) };
};
const atLeast = (value: number, bound: number): boolean => value >= bound;
const atMost = (value: number, bound: number): boolean => value <= bound;

/** The hot-document targets: across 4 processes and in one process against the best safe peer, and fair mode against non-fair. */
export function judgeHot(hot: HotFile): TargetVerdict[] {
  const source = `hot.json, ${hot.date.slice(0, 10)}`;
  const verdicts: TargetVerdict[] = [];
  for (const level of hot.levels) {
    const L = level.delay;
    const figure = (contender: string, layout: string) => level.figures.find((f) => f.contender === contender && f.layout === layout && f.perSecond.length > 0);
    const rate = (contender: string, layout: string): number | undefined => {
      const found = figure(contender, layout);
      return found && median(found.perSecond);
    };
    const bestPeer = (layout: string): number | undefined => {
      const peers = level.figures.filter((f) => f.layout === layout && !f.contender.startsWith('monglock') && f.perSecond.length > 0);
      return peers.length > 0 ? Math.max(...peers.map((f) => median(f.perSecond))) : undefined;
    };
    const push = (target: string, judged: { measured: string; met: boolean | undefined }) => verdicts.push({ target, delayMs: L, source, ...judged });
    const versusPeer = (layout: string) => {
      const mine = rate(MONGLOCK, layout);
      const best = bestPeer(layout);
      return mine !== undefined && best !== undefined ? mine / best : undefined;
    };
    push(`hot ×16 across 4 processes (4 × 4) ≥ ${L === 0 ? '1.0' : '1.3'}× the best safe peer`, at(versusPeer('4 × 4'), L === 0 ? 1 : 1.3, atLeast, '×', (v) => v));
    if (L === 0) push('hot ×16 in one process (1 × 16) ≥ 1.5× the best safe peer', at(versusPeer('1 × 16'), 1.5, atLeast, '×', (v) => v));
    for (const layout of ['1 × 16', '4 × 4', '16 × 1']) {
      const fair = figure(FAIR, layout);
      const plain = rate(MONGLOCK, layout);
      push(`fair ≥ 0.9× non-fair throughput (${layout})`, at(fair && plain ? median(fair.perSecond) / plain : undefined, 0.9, atLeast, '×', (v) => v));
      push(`fair: Jain's index ≥ 0.99 (${layout})`, at(fair, 0.99, atLeast, '', (f) => median(f.fairness)));
    }
  }
  return verdicts;
}

/**
 * Fair mode's worst wait of 16 waiters (hot.json), at most 16 sections (each as long as the fair
 * throughput says) plus 2 round trips (an uncontended acquire + release of the plain floor at the
 * same L, uncontended.json).
 */
export function judgeFairWaits(hot: HotFile, uncontended: UncontendedFile): TargetVerdict[] {
  const source = `hot.json, ${hot.date.slice(0, 10)}; uncontended.json, ${uncontended.date.slice(0, 10)}`;
  return hot.levels.flatMap((level) => {
    const roundTrips = uncontended.levels.find((u) => u.delay === level.delay)?.p50[PLAIN_FLOOR];
    return level.figures
      .filter((f) => f.contender === FAIR && f.perSecond.length > 0)
      .map((fair) => {
        const bound = roundTrips && roundTrips.length > 0 ? (16 * 1000) / median(fair.perSecond) + median(roundTrips) : undefined;
        const judged = bound === undefined ? { measured: 'not measured', met: undefined } : at(fair, bound, atMost, ' ms', (f) => median(f.worstWait));
        return { target: `fair: worst wait ≤ 16 sections + 2 round trips (${fair.layout})`, delayMs: level.delay, source, ...judged };
      });
  });
}

/** Uncontended acquire + release against the bare driver sending monglock's exact commands: the library's own cost. */
export function judgeUncontended(uncontended: UncontendedFile): TargetVerdict[] {
  const source = `uncontended.json, ${uncontended.date.slice(0, 10)}`;
  return uncontended.levels.map((level) => {
    const mine = level.p50[MONGLOCK];
    const exact = level.p50[EXACT_FLOOR];
    const ratio = mine?.length && exact?.length ? median(mine) / median(exact) : undefined;
    return { target: "uncontended acquire + release ≤ 1.10× monglock's exact commands through the bare driver", delayMs: level.delay, source, ...at(ratio, 1.1, atMost, '×', (v) => v) };
  });
}

/** The read-modify-write at L = 5 against the best safe peer (results.json). */
export function judgeReadModifyWrite(results: Results): TargetVerdict[] {
  const source = `results.json, ${results.date.slice(0, 10)}`;
  const level = results.levels.find((l) => l.delayMs === 5);
  if (!level) return [];
  const rmw = (name: string) => level.contenders.find((c) => c.name === name && !c.failed)?.rmw?.p50;
  const best = Math.min(...peersOf(level).map((p) => p.rmw?.p50 ?? Infinity));
  const ratio = (name: string) => {
    const mine = rmw(name);
    return mine !== undefined && Number.isFinite(best) ? mine / best : undefined;
  };
  return [
    { target: 'read-modify-write ≤ 0.7× the best safe peer (default write concerns)', delayMs: 5, source, ...at(ratio(MONGLOCK), 0.7, atMost, '×', (v) => v) },
    { target: 'read-modify-write ≤ 0.45× the best safe peer (acquired at w: 1)', delayMs: 5, source, ...at(ratio('monglock writeLock folded, acquire w: 1'), 0.45, atMost, '×', (v) => v) },
  ];
}

function readJson<T>(dir: string, file: string): T | undefined {
  const path = join(dir, file);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as T) : undefined;
}

/** Every target that the results in `dir` can judge. */
export function judgeTargets(dir: string): TargetVerdict[] {
  const hot = readJson<HotFile>(dir, 'hot.json');
  const uncontended = readJson<UncontendedFile>(dir, 'uncontended.json');
  const results = readJson<Results>(dir, 'results.json');
  const verdicts = [
    ...(hot ? judgeHot(hot) : []),
    ...(hot && uncontended ? judgeFairWaits(hot, uncontended) : []),
    ...(uncontended ? judgeUncontended(uncontended) : []),
    ...(results ? judgeReadModifyWrite(results) : []),
  ];
  return verdicts.sort((a, b) => a.delayMs - b.delayMs); // by level (a stable sort)
}

/** targets.md, from the results in `dir`. */
export function renderTargets(dir: string): string {
  const verdicts = judgeTargets(dir);
  const met = verdicts.filter((v) => v.met).length;
  return [
    '# Targets',
    '',
    `Judged by bench/targets.ts from the results in this directory (each row names its file and the day it was measured): ${met} of ${verdicts.length} met. Ratios are of medians over each figure's rounds; the hot and uncontended figures are of the built \`dist/\`.`,
    '',
    '| target | L (ms) | measured (bound) | met | from |',
    '|---|---|---|---|---|',
    ...verdicts.map((v) => `| ${v.target} | ${v.delayMs} | ${v.measured} | ${v.met === undefined ? '–' : v.met ? 'yes' : 'no'} | ${v.source} |`),
    '',
  ].join('\n');
}

/** Writes targets.md in `dir`, from the results there; returns it. */
export function writeTargets(dir: string): string {
  const table = renderTargets(dir);
  writeFileSync(join(dir, 'targets.md'), table);
  return table;
}

if (require.main === module) console.log(writeTargets(process.argv[2] ?? join(__dirname, 'results')));
