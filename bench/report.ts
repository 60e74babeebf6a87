/** One library's figures (medians over the rounds). */
export interface ContenderResult {
  readonly name: string;
  readonly kind: 'monglock' | 'peer' | 'floor';
  readonly note?: string;
  readonly failed?: string;
  /** Uncontended acquire + release, ms. */
  readonly latency: { p50: number; p99: number } | null;
  /** Workers -> critical sections per second and fairness on one hot resource. */
  readonly hot: Record<string, { perSecond: number; fairness: number }>;
  /** Acquire + release per second over many different resources. */
  readonly manyPerSecond: number | null;
  readonly commands: { acquire: number; release: number; refused: number | null } | null;
}

/** What a run writes to results.json. */
export interface Results {
  readonly backend: string;
  readonly date: string;
  readonly machine: string;
  readonly settings: { rounds: number; latencyIterations: number; hotMs: number; workers: number[]; manyResources: number; manyWorkers: number; manyRounds: number };
  readonly contenders: ContenderResult[];
  readonly skipped: string[];
}

const fmt = (value: number | null | undefined, digits = 0): string => (value === null || value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits));
const ratio = (value: number | null | undefined, base: number | null | undefined): string =>
  value && base ? `${(value / base).toFixed(2)}×` : '–';

/** The markdown table, with every figure also as a ratio to the floor and to the best peer. */
export function renderTable(results: Results): string {
  const floor = results.contenders.find((c) => c.kind === 'floor');
  const peers = results.contenders.filter((c) => c.kind === 'peer' && !c.failed);
  const best = (workers: number): number | undefined => Math.max(0, ...peers.map((p) => p.hot[workers]?.perSecond ?? 0)) || undefined;
  const bestMany = Math.max(0, ...peers.map((p) => p.manyPerSecond ?? 0)) || undefined;
  const bestLatency = Math.min(...peers.map((p) => p.latency?.p50 ?? Infinity));
  const { workers } = results.settings;
  const lines = [
    `Backend: **${results.backend}**; ${results.machine}; ${results.date.slice(0, 10)}; medians of ${results.settings.rounds} round(s) ` +
      `(${results.settings.manyRounds} for the ${results.settings.manyResources} resources, by ${results.settings.manyWorkers} workers), after a warm-up.`,
    '',
    `| library | acquire+release p50 / p99 (ms) | × floor | × best peer | ${workers.map((w) => `hot ×${w} (cs/s)`).join(' | ')} | fairness ×16 | hot ×16 × best peer | ${results.settings.manyResources} resources (/s) | × floor | commands acquire / release / refused |`,
    `|---|---|---|---|${workers.map(() => '---|').join('')}---|---|---|---|---|`,
  ];
  for (const c of results.contenders) {
    if (c.failed) {
      lines.push(`| ${c.name} | failed: ${c.failed.replace(/\|/g, '/').slice(0, 120)} |${' |'.repeat(workers.length + 8)}`);
      continue;
    }
    const cmds = c.commands ? `${c.commands.acquire} / ${c.commands.release} / ${c.commands.refused ?? '–'}` : '–';
    lines.push(
      `| ${c.name} | ${fmt(c.latency?.p50, 2)} / ${fmt(c.latency?.p99, 2)} | ${ratio(c.latency?.p50, floor?.latency?.p50)} | ${
        c.kind === 'floor' ? '–' : ratio(c.latency?.p50, Number.isFinite(bestLatency) ? bestLatency : undefined)
      } | ${workers.map((w) => fmt(c.hot[w]?.perSecond)).join(' | ')} | ${fmt(c.hot[16]?.fairness, 2)} | ${
        c.kind === 'floor' ? '–' : ratio(c.hot[16]?.perSecond, best(16))
      } | ${fmt(c.manyPerSecond)} | ${ratio(c.manyPerSecond, floor?.manyPerSecond)} | ${cmds} |`,
    );
  }
  lines.push('', ...results.contenders.filter((c) => c.note).map((c) => `- ${c.name}: ${c.note}`));
  if (results.skipped.length) lines.push('', 'Not measured:', ...results.skipped.map((reason) => `- ${reason}`));
  void bestMany;
  return `${lines.join('\n')}\n`;
}

/** An SVG line chart of hot-resource throughput versus workers. */
export function renderChart(results: Results): string {
  const series = results.contenders.filter((c) => c.kind !== 'floor' && !c.failed && Object.keys(c.hot).length > 0);
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
  const colors = ['#1b9e77', '#d95f02', '#7570b3', '#e7298a', '#66a61e', '#e6ab02', '#a6761d', '#666666', '#1f78b4'];
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="18" font-size="14">Critical sections per second on one hot resource (${escape(results.backend)})</text>`,
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
