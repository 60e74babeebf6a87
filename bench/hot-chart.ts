/**
 * The chart of `npm run bench:hot` (bench/results/hot.svg): one panel per modelled delay, in each
 * a group of bars per layout (processes × workers), one bar per contender at its median sections
 * per second, with a whisker from the round's minimum to its maximum. Also runs on its own:
 * `tsx bench/hot-chart.ts bench/results/hot.json` rewrites the SVG beside the JSON.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { median } from './harness';

/** What the chart reads of one level of hot.json. */
export interface ChartLevel {
  readonly delay: number;
  readonly figures: ReadonlyArray<{ readonly contender: string; readonly layout: string; readonly perSecond: readonly number[] }>;
}

const COLORS = ['#1b9e77', '#66c2a5', '#d95f02', '#7570b3', '#e7298a', '#e6ab02', '#a6761d', '#666666'];

export function renderHotChart(backend: string, levels: readonly ChartLevel[]): string {
  const contenders = [...new Set(levels.flatMap((level) => level.figures.map((figure) => figure.contender)))];
  const layouts = [...new Set(levels.flatMap((level) => level.figures.map((figure) => figure.layout)))];
  const panelWidth = 300;
  const panelHeight = 260;
  const left = 60;
  const top = 40;
  const legend = 18 * contenders.length + 20;
  const width = left + levels.length * (panelWidth + 20) + 10;
  const height = top + panelHeight + 50 + legend;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    '<rect width="100%" height="100%" fill="white"/>',
    `<text x="${left}" y="18" font-size="13">One hot document, 16 workers: critical sections per second, median and min–max (${escape(backend)})</text>`,
  ];
  levels.forEach((level, p) => {
    const x0 = left + p * (panelWidth + 20);
    const max = Math.max(1, ...level.figures.flatMap((figure) => figure.perSecond));
    const y = (value: number): number => top + panelHeight - (value / max) * panelHeight;
    parts.push(`<text x="${x0 + panelWidth / 2}" y="${top - 8}" text-anchor="middle" font-size="12">L = ${level.delay} ms</text>`);
    for (let t = 0; t <= 4; t++) {
      const value = (max * t) / 4;
      parts.push(`<line x1="${x0}" x2="${x0 + panelWidth}" y1="${y(value)}" y2="${y(value)}" stroke="#ddd"/>`);
      parts.push(`<text x="${x0 - 4}" y="${y(value) + 4}" text-anchor="end">${value.toFixed(0)}</text>`);
    }
    const groupWidth = panelWidth / layouts.length;
    const barWidth = (groupWidth - 12) / contenders.length;
    layouts.forEach((layout, g) => {
      const gx = x0 + g * groupWidth + 6;
      parts.push(`<text x="${gx + (groupWidth - 12) / 2}" y="${top + panelHeight + 16}" text-anchor="middle">${escape(layout)}</text>`);
      contenders.forEach((contender, c) => {
        const values = level.figures.find((figure) => figure.contender === contender && figure.layout === layout)?.perSecond ?? [];
        if (values.length === 0) return;
        const bx = gx + c * barWidth;
        const mid = bx + barWidth / 2;
        parts.push(`<rect x="${bx}" y="${y(median(values))}" width="${Math.max(1, barWidth - 1)}" height="${top + panelHeight - y(median(values))}" fill="${COLORS[c % COLORS.length]}"/>`);
        parts.push(`<line x1="${mid}" x2="${mid}" y1="${y(Math.min(...values))}" y2="${y(Math.max(...values))}" stroke="black"/>`);
      });
    });
  });
  parts.push(`<text x="${left}" y="${top + panelHeight + 34}">processes × workers per process</text>`);
  contenders.forEach((contender, c) => {
    const ly = top + panelHeight + 52 + 18 * c;
    parts.push(`<rect x="${left}" y="${ly - 10}" width="12" height="12" fill="${COLORS[c % COLORS.length]}"/>`, `<text x="${left + 18}" y="${ly}">${escape(contender)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

if (require.main === module) {
  const file = process.argv[2] ?? join(__dirname, 'results', 'hot.json');
  const results = JSON.parse(readFileSync(file, 'utf8')) as { backend: string; levels: ChartLevel[] };
  writeFileSync(join(dirname(file), 'hot.svg'), renderHotChart(results.backend, results.levels));
}
