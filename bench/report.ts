/** One library's figures at one modelled majority delay (medians over the rounds). */
export interface ContenderResult {
  readonly name: string;
  readonly kind: 'monglock' | 'peer' | 'floor';
  readonly note?: string;
  /** The write concern its lock writes are sent with. */
  readonly writeConcern?: string;
  /** Acquires at `w: 1` (unsafe): shown, but never the baseline of a ratio. */
  readonly unsafe?: boolean;
  readonly failed?: string;
  /** Uncontended acquire + release, ms. */
  readonly latency: { p50: number; p99: number } | null;
  /** Workers -> critical sections per second, fairness and the longest wait (ms) on one hot resource. */
  readonly hot: Record<string, { perSecond: number; fairness: number; worstWait?: number }>;
  /** Acquire + release per second over many different resources. */
  readonly manyPerSecond: number | null;
  /** One uncontended read-modify-write critical section (read the document, write it), ms. */
  readonly rmw?: { p50: number; p99: number } | null;
  readonly commands: { acquire: number; release: number; refused: number | null; majorityWrites?: number } | null;
}

/** Every contender at one modelled majority-commit delay. */
export interface LevelResults {
  /** How long the proxy held each majority write's reply, in ms. */
  readonly delayMs: number;
  readonly loadAverage: number[];
  readonly manyResources: number;
  /** Majority writes the proxy held over the whole level. */
  readonly majorityWrites: number;
  readonly contenders: ContenderResult[];
}

/** What a run writes to results.json. */
export interface Results {
  readonly backend: string;
  readonly date: string;
  readonly machine: string;
  readonly settings: { rounds: number; latencyIterations: number; hotMs: number; workers: number[]; manyResources: number[]; manyWorkers: number; rmwIterations: number; delays: number[] };
  readonly levels: LevelResults[];
  readonly skipped: string[];
}

const fmt = (value: number | null | undefined, digits = 0): string => (value === null || value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits));
const ratio = (value: number | null | undefined, base: number | null | undefined): string => (value && base ? `${(value / base).toFixed(2)}×` : '–');

/** The peers a ratio may compare with: those that acquire safely (not at `w: 1`). */
export function peersOf(level: LevelResults): ContenderResult[] {
  return level.contenders.filter((c) => c.kind === 'peer' && !c.failed && !c.unsafe);
}
const bestHot = (level: LevelResults, workers: number): number | undefined => Math.max(0, ...peersOf(level).map((p) => p.hot[workers]?.perSecond ?? 0)) || undefined;
const bestLatency = (level: LevelResults): number | undefined => {
  const best = Math.min(...peersOf(level).map((p) => p.latency?.p50 ?? Infinity));
  return Number.isFinite(best) ? best : undefined;
};
const bestRmw = (level: LevelResults): number | undefined => {
  const best = Math.min(...peersOf(level).map((p) => p.rmw?.p50 ?? Infinity));
  return Number.isFinite(best) ? best : undefined;
};

/** The full table of one level. */
function levelTable(results: Results, level: LevelResults): string[] {
  const floor = level.contenders.find((c) => c.kind === 'floor');
  const { workers } = results.settings;
  const lines = [
    `### L = ${level.delayMs} ms (load average ${level.loadAverage.map((l) => l.toFixed(2)).join(' ')}; ${level.majorityWrites} majority writes held)`,
    '',
    `| library | write concern | acquire+release p50 / p99 (ms) | × floor | × best peer | read-modify-write p50 (ms) | × best peer | ${workers.map((w) => `hot ×${w} (cs/s)`).join(' | ')} | fairness ×16 | worst wait ×16 (ms) | hot ×16 × best peer | ${level.manyResources} resources (/s) | × floor | commands acquire / release / refused | majority waits acquire+release |`,
    `|---|---|---|---|---|---|---|${workers.map(() => '---|').join('')}---|---|---|---|---|---|---|`,
  ];
  for (const c of level.contenders) {
    if (c.failed) {
      lines.push(`| ${c.name} | ${c.writeConcern ?? ''} | failed: ${c.failed.replace(/\|/g, '/').slice(0, 120)} |${' |'.repeat(workers.length + 11)}`);
      continue;
    }
    const cmds = c.commands ? `${c.commands.acquire} / ${c.commands.release} / ${c.commands.refused ?? '–'}` : '–';
    lines.push(
      `| ${c.name} | ${c.writeConcern ?? ''} | ${fmt(c.latency?.p50, 2)} / ${fmt(c.latency?.p99, 2)} | ${ratio(c.latency?.p50, floor?.latency?.p50)} | ${
        c.kind === 'floor' ? '–' : ratio(c.latency?.p50, bestLatency(level))
      } | ${fmt(c.rmw?.p50, 2)} | ${c.kind === 'floor' ? '–' : ratio(c.rmw?.p50, bestRmw(level))} | ${workers.map((w) => fmt(c.hot[w]?.perSecond)).join(' | ')} | ${fmt(c.hot[16]?.fairness, 2)} | ${fmt(
        c.hot[16]?.worstWait,
      )} | ${c.kind === 'floor' ? '–' : ratio(c.hot[16]?.perSecond, bestHot(level, 16))} | ${fmt(c.manyPerSecond)} | ${ratio(c.manyPerSecond, floor?.manyPerSecond)} | ${cmds} | ${fmt(c.commands?.majorityWrites)} |`,
    );
  }
  return lines;
}

/** The side-by-side summary: each headline figure at every level. */
function summaryTable(results: Results): string[] {
  const levels = results.levels;
  const head = levels.map((l) => `L=${l.delayMs}`);
  const lines = [
    '### Side by side',
    '',
    `| library | ${head.map((h) => `acquire+release p50 ms ${h}`).join(' | ')} | ${head.map((h) => `read-modify-write p50 ms ${h}`).join(' | ')} | ${head.map((h) => `hot ×16 cs/s ${h}`).join(' | ')} |`,
    `|---|${levels.map(() => '---|---|---|').join('')}`,
  ];
  const names = levels[0]?.contenders.map((c) => c.name) ?? [];
  for (const name of names) {
    const per = levels.map((l) => ({ level: l, c: l.contenders.find((x) => x.name === name) }));
    const cell = (value: number | undefined | null, base: number | undefined, digits: number): string => (value ? `${fmt(value, digits)} (${ratio(value, base)})` : '–');
    lines.push(
      `| ${name} | ${per.map(({ level, c }) => cell(c?.latency?.p50, level.contenders.find((x) => x.kind === 'floor')?.latency?.p50, 2)).join(' | ')} | ${per
        .map(({ level, c }) => cell(c?.rmw?.p50, bestRmw(level), 2))
        .join(' | ')} | ${per.map(({ level, c }) => cell(c?.hot[16]?.perSecond, bestHot(level, 16), 0)).join(' | ')} |`,
    );
  }
  lines.push('', 'Ratios: acquire+release to the floor (two majority findOneAndUpdates); read-modify-write and hot ×16 to the best peer at that L that acquires safely (not at `w: 1`).');
  return lines;
}

/** The markdown report: the side-by-side summary, then one full table per level. */
export function renderTable(results: Results): string {
  const first = results.levels[0];
  const lines = [
    `Backend: **${results.backend}**, behind a proxy that holds every majority write's reply for L ms (a replica set's commit wait); ${results.machine}; ${results.date.slice(0, 10)}; medians of ${results.settings.rounds} round(s), after a warm-up.`,
    '',
    ...summaryTable(results),
    '',
    ...results.levels.flatMap((level) => [...levelTable(results, level), '']),
    ...(first?.contenders.filter((c) => c.note).map((c) => `- ${c.name}: ${c.note}`) ?? []),
  ];
  if (results.skipped.length) lines.push('', 'Not measured:', ...results.skipped.map((reason) => `- ${reason}`));
  return `${lines.join('\n')}\n`;
}

/** An SVG line chart of hot-resource throughput versus workers, at L = 0. */
export function renderChart(results: Results): string {
  const level = results.levels[0];
  const series = (level?.contenders ?? []).filter((c) => c.kind !== 'floor' && !c.failed && Object.keys(c.hot).length > 0);
  const { workers } = results.settings;
  const width = 760;
  const height = 420;
  const left = 70;
  const right = 250;
  const top = 30;
  const bottom = 50;
  const max = Math.max(1, ...series.flatMap((c) => Object.values(c.hot).map((h) => h.perSecond)));
  const x = (i: number): number => left + (i * (width - left - right)) / Math.max(1, workers.length - 1);
  const y = (v: number): number => height - bottom - (v / max) * (height - top - bottom);
  const colors = ['#1b9e77', '#d95f02', '#7570b3', '#e7298a', '#66a61e', '#e6ab02', '#a6761d', '#666666', '#1f78b4', '#b15928'];
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="18" font-size="14">Critical sections per second on one hot resource, L = 0 (${escape(results.backend)})</text>`,
  ];
  for (let t = 0; t <= 4; t++) {
    const v = (max * t) / 4;
    parts.push(`<line x1="${left}" x2="${width - right}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`, `<text x="${left - 8}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(0)}</text>`);
  }
  workers.forEach((w, i) => parts.push(`<text x="${x(i)}" y="${height - bottom + 18}" text-anchor="middle">${w}</text>`));
  parts.push(`<text x="${(left + width - right) / 2}" y="${height - 10}" text-anchor="middle">concurrent workers</text>`);
  series.forEach((c, s) => {
    const color = colors[s % colors.length]!;
    const points = workers.map((w, i) => (c.hot[w] ? `${x(i)},${y(c.hot[w]!.perSecond)}` : '')).filter(Boolean).join(' ');
    parts.push(`<polyline fill="none" stroke="${color}" stroke-width="${c.kind === 'monglock' ? 3 : 1.5}" points="${points}"/>`);
    parts.push(`<text x="${width - right + 12}" y="${top + 16 * s + 10}" fill="${color}">${escape(c.name)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
