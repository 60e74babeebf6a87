/**
 * Which processes wait on a collection through monglock's change stream, as `monglock status
 * --streams` (and `watch --streams`) report them: the cursors `$currentOp` shows, or, on a server
 * that refuses `$currentOp`, why, with the count of open cursors its `serverStatus` gives.
 */
import type { Collection, Document } from 'mongodb';
import { helloOf } from '../../engine/deployment';
import { withDeadline } from '../../engine/store';
import { reason } from './doctor-checks';
import { textTable } from './text-table';

/** One of monglock's change streams on the collection: a waiting process's cursor. */
export interface ListedStream {
  /** The server's cursor id (a 64-bit integer, as a decimal string). */
  readonly cursorId: string;
  /** `getMore`: a getMore awaits events on it now; `idle`: between two getMores. */
  readonly state: 'getMore' | 'idle';
  /** The client's address and port; null for an idle cursor (the server names a client only while its getMore runs). */
  readonly client: string | null;
  /** The client's `appName`, when it gave one. */
  readonly appName: string | null;
  /** The client's driver (`nodejs 6.21.0`), from the metadata of its handshake. */
  readonly driver: string | null;
  readonly openedAt: Date | null;
  readonly lastUsedAt: Date | null;
}

/** What `$currentOp` (or the refusal of it) says of the change streams on one collection. */
export interface StreamReport {
  /** `db.collection`. */
  readonly namespace: string;
  readonly field: string;
  /** monglock's streams on `field` of the collection; null when they could not be listed (see `unavailable`). */
  readonly streams: readonly ListedStream[] | null;
  /** The other change streams on the collection (not monglock's, or on another lock field); null when not listed. */
  readonly others: number | null;
  /** True on a mongos: `$currentOp` read with `localOps`, its own clients' cursors only. */
  readonly mongos: boolean;
  /** Why the streams could not be listed: `inprog` (the privilege lacks), `refused` (the server answered an error: no `$currentOp` here), `failed` (no answer). */
  readonly unavailable?: 'inprog' | 'refused' | 'failed';
  /** The server's error, when the streams could not be listed. */
  readonly error?: string;
  /** Where `$currentOp` is refused: the open cursors of every kind `serverStatus` counts (`metrics.cursor.open.total`), if it does. */
  readonly openCursors?: number;
}

/** `$currentOp` as the report reads it: every user's operations and idle cursors (`localOps`: a mongos' own). */
export function currentOpPipeline(mongos: boolean): Document[] {
  return [{ $currentOp: { allUsers: true, idleCursors: true, ...(mongos && { localOps: true }) } }, { $match: { $or: [{ type: 'idleCursor' }, { op: 'getmore' }] } }];
}

const UNAUTHORIZED = 13;

/**
 * Reads `$currentOp` on the admin database (the primary; on a mongos, its own clients only) and
 * lists monglock's change streams on `collection`'s lock field `field`. Never throws for a refusal:
 * without the `inprog` privilege, where `$currentOp` is not a command (the report then carries the
 * server's count of open cursors, when it has one) or when it does not answer, the report says so.
 */
export async function readLockStreams(collection: Collection<Document>, field: string, timeout = 10_000): Promise<StreamReport> {
  const namespace = { db: collection.dbName, collection: collection.collectionName };
  const base = { namespace: `${namespace.db}.${namespace.collection}`, field, streams: null, others: null };
  const admin = collection.db.client.db('admin');
  let mongos = false;
  try {
    mongos = (await helloOf(collection, timeout)).msg === 'isdbgrid';
    const ops = await withDeadline('$currentOp', timeout, () => admin.aggregate(currentOpPipeline(mongos), { promoteLongs: false, readPreference: 'primary' }).toArray());
    return { ...base, mongos, ...lockStreamsOf(ops, namespace, field) };
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === UNAUTHORIZED) return { ...base, mongos, unavailable: 'inprog', error: reason(error) };
    if (typeof code !== 'number') return { ...base, mongos, unavailable: 'failed', error: reason(error) }; // a network error or the deadline
    const status = await withDeadline('serverStatus', timeout, () => admin.command({ serverStatus: 1 })).catch((): Document => ({}));
    const total: unknown = (status.metrics as Document | undefined)?.cursor?.open?.total;
    return { ...base, mongos, unavailable: 'refused', error: reason(error), ...(typeof total === 'number' && { openCursors: total }) };
  }
}

/**
 * The change streams among `ops` (documents of a `$currentOp` answer: idle cursors and getMore
 * operations) that read `namespace`: monglock's on `field` as rows ({@link isLockFeed}), the
 * others counted. A cursor on another namespace, or one that is not a change stream, is left out.
 */
export function lockStreamsOf(ops: readonly Document[], namespace: { readonly db: string; readonly collection: string }, field: string): { streams: ListedStream[]; others: number } {
  const streams: ListedStream[] = [];
  let others = 0;
  for (const op of ops) {
    const cursor = op.cursor as Document | undefined;
    const command = cursor?.originatingCommand as Document | undefined;
    const pipeline = command?.pipeline;
    if (!cursor || !Array.isArray(pipeline) || !isChangeStage(pipeline[0])) continue;
    const database = typeof command!.$db === 'string' ? command!.$db : String(op.ns ?? '').split('.')[0];
    if (command!.aggregate !== namespace.collection || database !== namespace.db) continue; // another collection, or a database's or the cluster's stream
    if (!isLockFeed(pipeline.slice(1) as Document[], field)) {
      others++;
      continue;
    }
    const metadata = (op.clientMetadata ?? {}) as Document;
    const driver = metadata.driver as Document | undefined;
    const appName = typeof op.appName === 'string' && op.appName !== '' ? op.appName : ((metadata.application as Document | undefined)?.name as string | undefined);
    const idle = op.type === 'idleCursor';
    streams.push({
      cursorId: String(cursor.cursorId),
      state: idle ? 'idle' : 'getMore',
      client: idle ? null : ((op.client ?? op.client_s ?? null) as string | null),
      appName: appName ?? null,
      driver: driver?.name === undefined ? null : `${String(driver.name)} ${String(driver.version ?? '')}`.trim(),
      openedAt: cursor.createdDate instanceof Date ? cursor.createdDate : null,
      lastUsedAt: cursor.lastAccessDate instanceof Date ? cursor.lastAccessDate : null,
    });
  }
  return { streams, others };
}

const isChangeStage = (stage: unknown): boolean => typeof stage === 'object' && stage !== null && Object.hasOwn(stage, '$changeStream');

/**
 * Whether `stages` (a change stream's pipeline after `$changeStream`) are monglock's waiting filter
 * on `field` (`lockChanges` of lib/waiting/change-feed.ts): a `$match` or `$addFields` that tests a
 * changed path's first part against the field (`{ $eq: [<first part>, '<field>'] }`), then the
 * projection of `documentKey` alone.
 */
export function isLockFeed(stages: readonly Document[], field: string): boolean {
  const last = stages[stages.length - 1]?.$project as Document | undefined;
  if (!last || Object.keys(last).join() !== 'documentKey' || Number(last.documentKey) !== 1) return false;
  return stages.some((stage) => [stage.$match, stage.$addFields].some((body) => body !== undefined && testsFirstPart(body, field)));
}

/**
 * Whether `value` holds `{ $eq: [{ $arrayElemAt: [<parts>, 0] }, field] }` at any depth, the parts a
 * path split at its dots (`{ $split: [<path>, '.'] }`), or split before (`'$$this'` of a `$map` over them).
 */
function testsFirstPart(value: unknown, field: string): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const eq = (value as Document).$eq;
  if (Array.isArray(eq) && eq[1] === field) {
    const [parts, index] = ((eq[0] as Document | undefined)?.$arrayElemAt ?? []) as unknown[];
    if (Number(index) === 0 && (parts === '$$this' || ((parts as Document | undefined)?.$split as unknown[] | undefined)?.[1] === '.')) return true;
  }
  return Object.values(value).some((child) => testsFirstPart(child, field));
}

/** The report as an operator reads it: a line, and a table of the streams. */
export function renderStreams(report: StreamReport): string {
  const where = `${report.namespace} (field ${report.field})`;
  if (report.unavailable === 'failed') return `change streams: not listed: $currentOp failed: ${report.error}`;
  if (report.unavailable === 'inprog') {
    return `change streams: not listed: $currentOp needs the inprog privilege (role clusterMonitor) to show other users' cursors, the waiting processes' among them: ${report.error}`;
  }
  if (report.unavailable === 'refused') {
    const count = report.openCursors === undefined ? '' : `; its serverStatus counts ${report.openCursors} open cursor(s) of every kind, on every collection`;
    return `change streams: not listed: this server refuses $currentOp: ${report.error}${count}`;
  }
  const streams = report.streams ?? [];
  const scope = report.mongos ? ' through this mongos (its own clients only; every other mongos has its own)' : '';
  const others = !report.others ? '' : `; ${report.others} other change stream(s) on it, not monglock's on ${report.field}`;
  if (streams.length === 0) return `change streams: no monglock waiter watches ${where}${scope}${others}`;
  const header = ['CURSOR ID', 'STATE', 'CLIENT', 'APP', 'DRIVER', 'OPENED', 'LAST USED'];
  const cells = streams.map((row) => [row.cursorId, row.state, row.client ?? '-', row.appName ?? '-', row.driver ?? '-', row.openedAt?.toISOString() ?? '-', row.lastUsedAt?.toISOString() ?? '-']);
  const table = textTable(header, cells);
  const idle = streams.some((row) => row.state === 'idle') ? ['(an idle cursor names no client: the server reports one only while a getMore runs)'] : [];
  return [`change streams: monglock's waiters watch ${where} through ${streams.length} cursor(s)${scope}${others}:`, ...table, ...idle].join('\n');
}

/** How often `watch --streams` reads `$currentOp` again, at most (ms). */
const STREAMS_EVERY_MS = 5_000;

/**
 * `watch --streams`: `first()` reads the report; `changes()`, called on each poll, reads it again
 * once `everyMs` have passed and returns the lines of what changed ({@link streamChanges}), or the
 * report's line once it can no longer be read (and nothing after).
 */
export function streamWatcher(collection: Collection<Document>, field: string, everyMs = STREAMS_EVERY_MS): { readonly first: () => Promise<StreamReport>; readonly changes: () => Promise<string[]> } {
  let last: StreamReport | undefined;
  let readAt = 0;
  const read = async (): Promise<StreamReport> => {
    readAt = Date.now();
    return (last = await readLockStreams(collection, field));
  };
  return {
    first: read,
    async changes(): Promise<string[]> {
      if (!last || last.unavailable || Date.now() - readAt < everyMs) return [];
      const before = last;
      const after = await read();
      return after.unavailable ? [`${new Date().toISOString()} ${renderStreams(after)}`] : streamChanges(before, after);
    },
  };
}

/** What changed between two reports, as `watch` prints it: `+ stream` opened, `- stream` closed (by cursor id). */
export function streamChanges(before: StreamReport, after: StreamReport): string[] {
  const at = new Date().toISOString();
  const [was, is] = [before.streams ?? [], after.streams ?? []];
  const ids = (rows: readonly ListedStream[]): Set<string> => new Set(rows.map((row) => row.cursorId));
  const [wasIds, isIds] = [ids(was), ids(is)];
  const describe = (row: ListedStream): string => `stream ${row.cursorId} ${row.client ?? '-'} ${row.appName ?? '-'}`;
  return [...was.filter((row) => !isIds.has(row.cursorId)).map((row) => `${at} - ${describe(row)}`), ...is.filter((row) => !wasIds.has(row.cursorId)).map((row) => `${at} + ${describe(row)}`)];
}
