/**
 * The lifecycle table of docs/hapi.md as data: each way hapi ends a request (a row) for each way
 * a route holds its lock (a column), with what the client must see. The spec
 * lifecycle-table.spec.ts runs one case per cell and checks that docs/hapi.md holds the table
 * {@link markdownTable} renders from it.
 */

/** The ways a route holds its lock. */
export const COLUMNS = ['route', 'commit', 'commitAll', 'checkout'] as const;
export type Column = (typeof COLUMNS)[number];

export const COLUMN_TITLES: Record<Column, string> = {
  route: 'route lock (handler returns a value)',
  commit: "handler's `commit`",
  commitAll: '`commitAll` (`filters`)',
  checkout: 'checkout',
};

/**
 * When the lock is released, relative to the status line of the answer:
 * - `before`: released before the status line goes out;
 * - `handed`: kept, live (above its keeper's margin), for the client that has its JSON;
 * - `last-byte`: released after the status line, before the last byte of the body;
 * - `after`: released after the answer went out (a listed exception: its note says why);
 * - `none`: never held by this request.
 */
export type Release = 'before' | 'handed' | 'last-byte' | 'after' | 'none';

/** Whether the route's commit was applied (`partly applied`: a group's first writes only; `null`: the column has no commit). */
export type Applied = 'applied' | 'partly applied' | 'not applied' | null;

/** What one cell says. */
export interface Cell {
  readonly release: Release;
  /** The status the client gets; 0: none (the client is gone). */
  readonly status: number;
  readonly commit: Applied;
  /** Keys of {@link NOTES} that explain an exception. */
  readonly notes: readonly string[];
}

/** A cell that cannot occur, and why. */
export interface Impossible {
  readonly impossible: string;
}

/** One way hapi ends a request. */
export interface Row {
  readonly id: string;
  /** As the table shows it. */
  readonly label: string;
  /** `inject`: through server.inject (hapi treats it differently for a timeout, a stop). */
  readonly transport: 'http' | 'inject';
  readonly cells: Readonly<Record<Column, Cell | Impossible>>;
}

/** Footnotes of the exceptions and of what the cells leave out. */
export const NOTES: Record<string, string> = {
  stream: "a stream body is read under the lock, released before its last byte goes out (the status line and headers go before; a commit's value cannot be a stream: 500, nothing written)",
  gone: 'hapi answers (503, or nothing to a client gone) while route code still runs (a POST\'s client gone: once the handler ended, skipping onPreResponse); the lock is released when that code ends, and a commit is not applied (refused once hapi answered, never reached when it skips onPreResponse)',
  abandon: 'the handler wrote its answer itself: the plugin cannot hold it back; released once hapi finishes the request',
  later: "monglock's onPreResponse step runs before every other (those added before the plugin without one, on the server or a route's own, run it first); one that runs after it may still change the answer: a throw there answers 500 for a commit already applied (hapi has no hook after it)",
  wrapped: "a checkout whose answer an onPreResponse after monglock's replaced: kept for the client only if the body it gets holds the lock's id, else released once the response went out",
  partial: 'a 206 carrying part of the JSON, or a 304 hapi made of it: the client has no whole lock; released once the response is finished',
  stop: 'server.stop() through server.inject: hapi waits for no injected request, so onPostStop aborts the route\'s signal at once; a commit returned after that is refused',
  head: 'HEAD on a GET route runs the handler: its commit is applied (the route decides what a GET does)',
  unknown: "the commit landed but its outcome stays unknown: answered with its `DbError` (`data.applied: 'unknown'`), as the lock layer settles it",
  group: "a group's commits are separate writes, one after another: those before the unsettled one landed, those after it were not sent (docs/api.md, commitAll)",
  closed: "an onPostHandler extension's `h.close` after the handler returned a commit: the commit is applied with the release before the close goes out, as for a 204 (hapi ends the response with no body and Node's default 200; a 500 when the commit cannot be applied)",
  etag: "hapi makes the 304 from the route's etag after the commit was applied: a route that commits should give the answer an etag that changes with the commit",
  unasked: 'the handler returned no commit (it never ran, or answered `h.close`/`h.abandon`): a success status says nothing of one',
};

const RELEASE_TEXT: Record<Release, string> = {
  before: 'released before',
  handed: 'kept (client has it)',
  'last-byte': 'released before last byte',
  after: 'released after',
  none: 'never held',
};

const EXCEPTIONS: Record<string, string> = {
  'no-commit': 'no commit to be on its way',
};

/**
 * Parses a cell: `'<release> <status> [applied|partly|none] [^note …]'`, or `'x:<why>'` for a cell that
 * cannot occur. The commit token is required in the commit columns and refused in the others.
 */
function cell(column: Column, text: string): Cell | Impossible {
  if (text.startsWith('x:')) return { impossible: EXCEPTIONS[text.slice(2)] ?? text.slice(2) };
  const [release, status, ...rest] = text.split(' ');
  const notes = rest.filter((token) => token.startsWith('^')).map((token) => token.slice(1));
  const commitToken = rest.find((token) => !token.startsWith('^'));
  const commits = column === 'commit' || column === 'commitAll';
  if (commits !== (commitToken !== undefined)) throw new Error(`cell ${column} "${text}": the commit columns say whether it was applied, the others do not`);
  for (const note of notes) if (!(note in NOTES)) throw new Error(`cell ${column} "${text}": no note ${note}`);
  const known = !Number.isNaN(Number(status)) && (release ?? '') in RELEASE_TEXT && ['applied', 'partly', 'none', undefined].includes(commitToken);
  if (!known) throw new Error(`cell ${column} "${text}": expected <release> <status> [applied|partly|none] [^note …]`);
  return {
    release: release as Release,
    status: Number(status),
    commit: commitToken === undefined ? null : ({ applied: 'applied', partly: 'partly applied', none: 'not applied' } as const)[commitToken as 'applied' | 'partly' | 'none'],
    notes,
  };
}

/** A row from its four cells (route, commit, commitAll, checkout). */
function row(id: string, label: string, transport: 'http' | 'inject', texts: readonly [string, string, string, string]): Row {
  const cells = Object.fromEntries(COLUMNS.map((column, index) => [column, cell(column, texts[index]!)])) as Record<Column, Cell | Impossible>;
  return { id, label, transport, cells };
}

/** The table. */
export const ROWS: readonly Row[] = [
  row('value', 'handler returns a value (the lock for a checkout)', 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'handed 200']),
  row('response', 'handler returns a response object (`.code(201)`)', 'http', ['before 201', 'before 201 applied', 'before 201 applied', 'handed 201']),
  row('stream', 'handler returns a stream', 'http', ['last-byte 200 ^stream', 'before 500 none ^stream', 'before 500 none ^stream', 'handed 200']),
  row('takeover', "a pre method's takeover (the lock's JSON for a checkout)", 'http', ['before 200', 'before 200 none ^unasked', 'before 200 none ^unasked', 'handed 200']),
  row('boom', 'handler throws a boom (422)', 'http', ['before 422', 'before 422 none', 'before 422 none', 'before 422']),
  row('pre', 'a pre method throws (403)', 'http', ['before 403', 'before 403 none', 'before 403 none', 'before 403']),
  row('parallel-pre', 'a pre method throws (403) while another of its parallel set runs', 'http', ['before 403', 'before 403 none', 'before 403 none', 'before 403']),
  row('fail-action', "a pre's `failAction` takes over (400)", 'http', ['before 400', 'before 400 none', 'before 400 none', 'before 400']),
  row('response-validation', 'response validation fails', 'http', ['before 500', 'before 500 none', 'before 500 none', 'before 500']),
  row('close', '`h.close` (handler)', 'http', ['before 200', 'before 200 none ^unasked', 'before 200 none ^unasked', 'before 200']),
  row('close-pre', '`h.close` (pre method)', 'http', ['before 200', 'before 200 none ^unasked', 'before 200 none ^unasked', 'before 200']),
  row('close-post-handler', '`h.close` (onPostHandler extension)', 'http', ['before 200', 'before 200 applied ^closed', 'before 200 applied ^closed', 'before 200']),
  row('max-hold-after', '`maxHold` (250 ms) passes after the answer (a checkout is still held 300 ms after it)', 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'handed 200']),
  row('max-hold', '`maxHold` passes while the handler runs (it answers all the same)', 'http', ['before 200', 'before 500 none', 'before 500 none', 'before 500']),
  row('lease-lost', 'the lock is taken while the handler runs (force-released elsewhere)', 'http', ['before 200', 'before 409 none', 'before 409 none', 'before 409']),
  row('abandon', '`h.abandon` after the handler answered by hand', 'http', ['after 200 ^abandon', 'after 200 none ^abandon ^unasked', 'after 200 none ^abandon ^unasked', 'after 200 ^abandon']),
  row('timeout', '`timeout.server` while the handler runs', 'http', ['after 503 ^gone', 'after 503 none ^gone', 'after 503 none ^gone', 'after 503 ^gone']),
  row('timeout-inject', '`timeout.server` while the handler runs', 'inject', ['after 503 ^gone', 'after 503 none ^gone', 'after 503 none ^gone', 'after 503 ^gone']),
  row('disconnect', 'the client disconnects while the handler runs (GET)', 'http', ['after 0 ^gone', 'after 0 none ^gone', 'after 0 none ^gone', 'after 0 ^gone']),
  row('disconnect-post', 'the client disconnects while the handler runs (POST)', 'http', ['after 0 ^gone', 'after 0 none ^gone', 'after 0 none ^gone', 'after 0 ^gone']),
  row('header', 'a header hapi cannot write (non-latin-1 `content-disposition`)', 'http', ['before 500', 'before 500 none', 'before 500 none', 'before 500']),
  row('cookie', 'a cookie hapi cannot write (`;` in a strict cookie)', 'http', ['before 500', 'before 500 none', 'before 500 none', 'before 500']),
  row('earlier-plugin-takeover', 'onPreResponse of a plugin registered before monglock takes over', 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'after 200 ^wrapped']),
  row('earlier-plugin-throws', 'onPreResponse of a plugin registered before monglock throws', 'http', ['before 500', 'before 500 applied ^later', 'before 500 applied ^later', 'after 500 ^later']),
  row('later-plugin-takeover', 'onPreResponse of a plugin registered after monglock takes over', 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'after 200 ^wrapped']),
  row('later-plugin-throws', 'onPreResponse of a plugin registered after monglock throws', 'http', ['before 500', 'before 500 applied ^later', 'before 500 applied ^later', 'after 500 ^later']),
  row('server-first-takeover', "onPreResponse added on the server before monglock's registration takes over", 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'after 200 ^wrapped']),
  row('server-first-throws', "onPreResponse added on the server before monglock's registration throws", 'http', ['before 500', 'before 500 applied ^later', 'before 500 applied ^later', 'after 500 ^later']),
  row('route-ext-takeover', "the route's own onPreResponse takes over (route added after the plugin)", 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'after 200 ^wrapped']),
  row('route-ext-throws', "the route's own onPreResponse throws (route added after the plugin)", 'http', ['before 500', 'before 500 applied ^later', 'before 500 applied ^later', 'after 500 ^later']),
  row('early-route-ext-takeover', "the route's own onPreResponse takes over (route added before the plugin)", 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'after 200 ^wrapped']),
  row('early-route-ext-throws', "the route's own onPreResponse throws (route added before the plugin)", 'http', ['before 500', 'before 500 applied ^later', 'before 500 applied ^later', 'after 500 ^later']),
  row('head', '`HEAD` (GET route)', 'http', ['before 200', 'before 200 applied ^head', 'before 200 applied ^head', 'before 200']),
  row('204', 'answered 204', 'http', ['before 204', 'before 204 applied', 'before 204 applied', 'before 204']),
  row('205', 'answered 205', 'http', ['before 205', 'before 205 applied', 'before 205 applied', 'before 205']),
  row('206', '206 (a `Range` request on a GET route)', 'http', ['before 206', 'before 206 applied', 'before 206 applied', 'after 206 ^partial']),
  row('304', '304 (`If-None-Match` on a GET route with an etag)', 'http', ['before 304', 'before 304 applied ^etag', 'before 304 applied ^etag', 'after 304 ^partial']),
  row('commit-unknown', "the commit's reply is lost and MongoDB cannot be reached to settle it", 'http', ['x:no-commit', 'before 500 applied ^unknown', 'before 500 partly ^unknown ^group', 'x:no-commit']),
  row('timeout-waiting', '`timeout.server` while the request waits for its lock', 'http', ['none 503', 'none 503 none', 'none 503 none', 'none 503']),
  row('timeout-waiting-inject', '`timeout.server` while the request waits for its lock', 'inject', ['none 503', 'none 503 none', 'none 503 none', 'none 503']),
  row('stop-waiting', '`server.stop()` while the request waits for its lock', 'http', ['none 503', 'none 503 none', 'none 503 none', 'none 503']),
  row('stop-waiting-inject', '`server.stop()` while the request waits for its lock', 'inject', ['none 503', 'none 503 none', 'none 503 none', 'none 503']),
  row('stop-running', '`server.stop()` while the handler runs', 'http', ['before 200', 'before 200 applied', 'before 200 applied', 'handed 200']),
  row('stop-running-inject', '`server.stop()` while the handler runs', 'inject', ['before 200 ^stop', 'before 500 none ^stop', 'before 500 none ^stop', 'before 500 ^stop']),
  row('stop-committing', "`server.stop()` while the commit's write is on its way", 'http', ['x:no-commit', 'before 200 applied', 'before 200 applied', 'x:no-commit']),
  row('stop-committing-inject', "`server.stop()` while the commit's write is on its way", 'inject', ['x:no-commit', 'before 200 applied', 'before 200 applied', 'x:no-commit']),
];


/** A cell as the markdown table shows it. */
function cellText(value: Cell | Impossible): string {
  if ('impossible' in value) return `— (${value.impossible})`;
  const parts = [RELEASE_TEXT[value.release]];
  if (value.commit !== null) parts.push(value.commit);
  parts.push(value.status === 0 ? 'no answer' : String(value.status));
  const marks = value.notes.map((note) => ` [${Object.keys(NOTES).indexOf(note) + 1}]`).join('');
  return parts.join(' · ') + marks;
}

/** The markdown of the table and its notes, as docs/hapi.md holds it. */
export function markdownTable(): string {
  const header = `| how hapi ends the request | via | ${COLUMNS.map((column) => COLUMN_TITLES[column]).join(' | ')} |`;
  const rule = `|---|---|${COLUMNS.map(() => '---').join('|')}|`;
  const lines = ROWS.map((r) => `| ${r.label} | ${r.transport === 'http' ? 'HTTP' : 'inject'} | ${COLUMNS.map((column) => cellText(r.cells[column])).join(' | ')} |`);
  const notes = Object.values(NOTES).map((text, index) => `${index + 1}. ${text}`);
  return [header, rule, ...lines, '', ...notes].join('\n');
}
