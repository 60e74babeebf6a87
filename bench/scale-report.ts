/** The markdown of `bench:scale`: one table per scenario, the backend and what a mongod would change. */
import { median } from './harness';
import { isLockCommand, type Window } from './scale-probe';
import type { HeldRow, ProcessesRow, ScaleRow, WaitersRow } from './scale-scenarios';
import { WORKED_DOCUMENTS } from './scale-scenarios';

/** What a run writes to its JSON file. */
export interface ScaleResults {
  readonly backend: string;
  /** `mongo-java-server`, `mongod`, …: what answered. */
  readonly server: string;
  /** mongo-java-server as support/java starts it since issue 39: mongod-shaped change events, findAndModify in its oplog, a waiting getMore, `_id` plans (absent in runs before). */
  readonly faithfulLauncher?: boolean;
  readonly label: string;
  /** The flags the run was given (absent in runs before they were recorded). */
  readonly args?: readonly string[];
  readonly date: string;
  readonly commit: string;
  readonly machine: string;
  readonly settings: { readonly settleMs: number; readonly measureMs: number; readonly holdMs: number; readonly quick: boolean };
  readonly rows: ScaleRow[];
}

const fmt = (value: number | null | undefined, digits = 0): string => (value === null || value === undefined || !Number.isFinite(value) ? '–' : value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }));
const load = (row: ScaleRow): string => row.load.map((value) => value.toFixed(2)).join(' ');
const onOff = (streams: boolean): string => (streams ? 'on' : 'off');

/** The lock commands of a window by name, each per `per` per second, largest first: `findAndModify 8.10, aggregate 1.02`. */
function byCommand(window: Window, per: number): string {
  return Object.entries(window.commands)
    .filter(([label]) => isLockCommand(label))
    .sort((a, b) => b[1] - a[1])
    .map(([label, count]) => `${label} ${fmt(count / per / window.seconds, 2)}`)
    .join(', ');
}

function errorLines(rows: ReadonlyArray<{ title: string; errors: readonly string[] }>): string[] {
  const lines = rows.filter((row) => row.errors.length > 0).map((row) => `- ${row.title}: ${row.errors.map((error) => `"${error.replace(/\|/g, '/')}"`).join('; ')}`);
  return lines.length > 0 ? ['', 'First errors (count × message):', '', ...lines] : [];
}

function waitersTable(rows: readonly WaitersRow[]): string[] {
  return [
    '## Waiters per process',
    '',
    'One process holds N documents; a second one (measured) starts N waiters, one per document (`acquire(…, { wait: 60000 })`). Over the window (after the settle period): lock commands per waiter per second (change-stream commands apart), and the stream\'s getMores. Then all N are released at once: the time from the first release sent to the last acquisition, and the waits that failed.',
    '',
    '| streams | waiters | lock commands / waiter / s | by command (/ waiter / s) | getMore / s | longest getMore gap, ms: window / until the last acquisition | release → last acquisition, ms | acquired / failed | CPU, % of a core | RSS, MB | backend CPU, % | backend RSS, MB | run, s | load |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (row) =>
        `| ${onOff(row.streams)} | ${fmt(row.n)} | ${fmt(row.window.lockCommands / row.n / row.window.seconds, 2)} | ${byCommand(row.window, row.n)} | ${row.streams ? fmt(row.window.getMores / row.window.seconds, 1) : '–'} | ${fmt(row.longestGetMoreGapMs)} / ${fmt(row.longestGetMoreGapWholeMs)} | ${fmt(row.releaseToLastMs)} | ${fmt(row.acquired)} / ${fmt(row.failed)} | ${fmt(row.window.cpuPercent)} | ${fmt(row.window.rssMb)} | ${fmt(row.backend.cpuPercent)} | ${fmt(row.backend.rssMb)} | ${fmt(row.elapsedS)} | ${load(row)} |`,
    ),
    ...errorLines(rows.map((row) => ({ title: `streams ${onOff(row.streams)}, ${fmt(row.n)} waiters`, errors: row.errors }))),
  ];
}

function heldTable(rows: readonly HeldRow[]): string[] {
  return [
    '## Held locks per process',
    '',
    'One process (measured) starts N `using()` bodies at once, one per document, each holding until told to end; the window is the hold, counted from the last acquisition. Round trips: every command the process sent; documents written: `nModified` of update replies and findAndModify replies that wrote; statements: write statements sent. Per lock acquired, per second. Lost: bodies whose signal aborted (from the first acquisition to the end).',
    '',
    '| lease, s | locks | acquired / failed | lost | round trips / lock / s | documents written / lock / s | write statements / lock / s | by command (/ lock / s) | acquisition, s | CPU, % of a core | RSS, MB | backend CPU, % | backend RSS, MB | hold, s | run, s | load |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((row) => {
      const per = row.acquired > 0 ? row.acquired : NaN; // none held: no figure per held lock
      return `| ${fmt(row.leaseMs / 1000)} | ${fmt(row.n)} | ${fmt(row.acquired)} / ${fmt(row.failed)} | ${fmt(row.lost)} | ${fmt(row.window.lockCommands / per / row.window.seconds, 3)} | ${fmt(row.window.written / per / row.window.seconds, 3)} | ${fmt(row.window.statements / per / row.window.seconds, 3)} | ${row.acquired > 0 ? byCommand(row.window, per) : '–'} | ${row.acquired > 0 ? fmt(row.acquireMs / 1000, 1) : '–'} | ${fmt(row.window.cpuPercent)} | ${fmt(row.window.rssMb)} | ${fmt(row.backend.cpuPercent)} | ${fmt(row.backend.rssMb)} | ${fmt(row.window.seconds, 1)} | ${fmt(row.elapsedS)} | ${load(row)} |`;
    }),
    ...errorLines(rows.flatMap((row) => [
      { title: `${fmt(row.n)} locks, ${fmt(row.leaseMs / 1000)} s lease, acquisitions failed`, errors: row.errors },
      { title: `${fmt(row.n)} locks, ${fmt(row.leaseMs / 1000)} s lease, leases lost`, errors: row.lostReasons },
    ])),
  ];
}

/** `median (max)` of a figure over the waiting processes. */
const overProcesses = (row: ProcessesRow, figure: (window: Window) => number, digits: number): string => {
  const values = row.waiting.map(figure);
  return `${fmt(median(values), digits)} (${fmt(Math.max(...values), digits)})`;
};

function processesTable(rows: readonly ProcessesRow[]): string[] {
  return [
    '## Processes per collection',
    '',
    `P processes (measured) each wait on one document of their own, held by another process, while a worker process works ${WORKED_DOCUMENTS} other documents (acquire/release loops). Per waiting process over the window, median (max) over the P: change-stream documents received per second, lock commands and attempts (findAndModify) per second (each process has one waiter), and its CPU. Then the held documents are released: each waiting process must acquire its own.`,
    '',
    '| streams | waiting processes | events / process / s | lock commands / waiter / s | attempts / waiter / s | CPU per waiting process, % | worker sections / s | worker lock commands / s | worker CPU, % | backend CPU, % | acquired after the release | run, s | load |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (row) =>
        `| ${onOff(row.streams)} | ${row.p} | ${overProcesses(row, (w) => w.events / w.seconds, 0)} | ${overProcesses(row, (w) => w.lockCommands / w.seconds, 1)} | ${overProcesses(row, (w) => (w.commands.findAndModify ?? 0) / w.seconds, 1)} | ${overProcesses(row, (w) => w.cpuPercent, 0)} | ${fmt(row.sectionsPerSecond)} | ${fmt(row.worker.lockCommands / row.worker.seconds)} | ${fmt(row.worker.cpuPercent)} | ${fmt(row.backend.cpuPercent)} | ${row.acquiredAfterRelease} / ${row.p} | ${fmt(row.elapsedS)} | ${load(row)} |`,
    ),
    ...errorLines(rows.map((row) => ({ title: `streams ${onOff(row.streams)}, ${row.p} processes`, errors: [...row.errors, ...row.workerErrors.map((error) => `worker: ${error}`)] }))),
  ];
}

/** What the figures mean on the backend that answered, and what a mongod would change. */
function caveats(server: string, faithfulLauncher: boolean): string[] {
  const mongod = [
    '**What a mongod would change.** Its `getMore` waits for a change up to `maxAwaitTimeMS` (an idle stream costs about one getMore a second instead of one every 4–8 ms), every event carries `documentKey._id` (only the waiters of the changed document are nudged), and acquisitions (findAndModify) are in its oplog (they send events too). On a replica set, each write at majority waits for the commit, which bounds the rates more than the server\'s CPU does. It plans `_id` lookups from the index whatever the other clauses, and serves more commands a second: the absolute rates differ; the growth with N and P is what carries over.',
  ];
  if (server !== 'mongo-java-server') return mongod;
  if (faithfulLauncher) {
    return [
      '**Backend caveats (mongo-java-server as support/java starts it).** Its change streams are mongod-shaped (every event names its document and describes an update; findAndModify writes are in its oplog; a `getMore` waits up to `maxAwaitTimeMS` for a change), and a filter with an `_id` equality is planned from the `_id` index, as mongod plans it (docs/backends.md lists what still differs). It serves roughly 1,000–2,000 lock commands a second on 2 cores, runs no replica set (no majority commit waits) and has one clock: read the shapes, not the rates.',
      '',
      ...mongod,
    ];
  }
  return [
    '**Backend caveats (mongo-java-server).** Read the shapes, not the rates: its `getMore` answers at once (no awaitData: the library paces an idle stream at a getMore every 4–8 ms), its update events carry no `_id` (each one nudges every waiter of the process), its oplog does not record findAndModify (acquisitions send no events; releases, sent as `update`, do), and it serves roughly 1,000–2,000 lock commands a second on 2 cores. A query is served from an index only when its keys are exactly the index\'s: lock filters scan the collection, so figures that grow with the collection\'s size are partly the backend\'s.',
    '',
    ...mongod,
  ];
}

/** The whole markdown report. */
export function renderScale(results: ScaleResults): string {
  const of = <R extends ScaleRow>(scenario: R['scenario']): R[] => results.rows.filter((row): row is R => row.scenario === scenario);
  const sections = [
    of<WaitersRow>('waiters').length > 0 ? waitersTable(of<WaitersRow>('waiters')) : [],
    of<HeldRow>('held').length > 0 ? heldTable(of<HeldRow>('held')) : [],
    of<ProcessesRow>('processes').length > 0 ? processesTable(of<ProcessesRow>('processes')) : [],
  ].filter((lines) => lines.length > 0);
  const { settleMs, measureMs, holdMs, quick } = results.settings;
  const loads = results.rows.map((row) => row.load[0]!);
  return [
    `# Load as the crowd grows (bench:scale)${results.label ? `: ${results.label}` : ''}`,
    '',
    `Generated by \`npm run bench:scale${results.args?.length ? ` -- ${results.args.map((arg) => (/\s/.test(arg) ? JSON.stringify(arg) : arg)).join(' ')}` : quick ? ' -- --quick' : ''}\` on ${results.date.slice(0, 16).replace('T', ' ')} UTC at ${results.commit}: ${results.backend}; ${results.machine}. Waiters and processes: a settle period of ${settleMs / 1000} s, then a window of ${measureMs / 1000} s; held locks: held ${holdMs / 1000} s from the last acquisition. Every process is a child of the run with a client of its own (default pool), counting its commands by driver command monitoring; "load" is the 1, 5 and 15 minute load average when the row ended. CPU: % of one core over the window (the process's \`cpuUsage\`, the backend's \`/proc/<pid>/stat\`).${loads.length > 0 ? ` The 1-minute load average went from ${fmt(Math.min(...loads), 2)} to ${fmt(Math.max(...loads), 2)} over the rows: above the core count, every process waits for a CPU, and the rates and losses are the machine's as much as the library's.` : ''}`,
    '',
    ...caveats(results.server, results.faithfulLauncher === true),
    '',
    ...sections.flatMap((lines) => [...lines, '']),
  ].join('\n');
}
