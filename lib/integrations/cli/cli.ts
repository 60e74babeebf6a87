/**
 * `npx monglock`: see and operate the locks of a collection.
 *   monglock status  --uri <uri> --db <db> --collection <name> [--field lock] [--resources] [--all] [--streams] [--json]
 *   monglock watch   (same options) [--interval 1000]
 *   monglock release (same options) (--id <lockId> | --doc <_id> (--tag <tag> | --quarantine)) [--yes]
 *   monglock doctor  --uri <uri> --db <db> --collection <name> [--field lock] [--filter <ejson>] [--max-clock-skew <ms>] [--json]
 * Exit codes: 0 done, 1 failed (MongoDB, nothing to release, not confirmed, nothing released, a failing doctor finding), 2 usage.
 */
import { createInterface } from 'node:readline/promises';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { BSON, MongoClient, type Collection, type Document } from 'mongodb';
import { documentLocks, listDocumentLocks, listResourceLocks, suggestedIndexCommand, untilIndexOf, type ListedLock } from './lock-listing';
import { RESOURCE_FIELD } from '../../protocol/resource-document';
import { doctorCommand } from './doctor-command';
import { collectionOptions } from './cli-options';
import { LockPaths } from '../../protocol/stored-format';
import { withdrawLiveOperation } from '../../protocol/release';
import { readLockStreams, renderStreams, streamWatcher } from './stream-listing';
import { textTable } from './text-table';
import { dropTicketOperation } from '../../protocol/tickets';
import { CliError } from './cli-error';
import { listQuarantines, releaseQuarantine, withQuarantines } from './quarantine-listing';

const { EJSON } = BSON;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const VERSION = (require('../../../package.json') as { version: string }).version;

interface Target {
  uri: string;
  db: string;
  collection: string;
  field: string;
  resources?: boolean;
  all?: boolean;
  json?: boolean;
  /** Also list the processes that wait through monglock's change stream (`$currentOp`). */
  streams?: boolean;
}

/**
 * Opens the collection (reads on the primary, whatever the URI says: a secondary returns stale
 * locks), runs `body`, closes the client. A namespace that does not exist is an error, not an
 * empty listing: a misspelled `--db` or `--collection` must not read as "no locks".
 */
async function withCollection<T>(target: Target, body: (collection: Collection<Document>) => Promise<T>): Promise<T> {
  const client = new MongoClient(target.uri, { serverSelectionTimeoutMS: 5_000, readPreference: 'primary' });
  try {
    await client.connect();
    const db = client.db(target.db);
    const names = (await db.listCollections({}, { nameOnly: true, readPreference: 'primary' }).toArray()).map((info) => info.name);
    if (!names.includes(target.collection)) {
      const known = names.length === 0 ? `database ${target.db} has no collections` : `its collections: ${names.sort().join(', ')}`;
      throw new CliError(`namespace ${target.db}.${target.collection} does not exist (${known})`);
    }
    return await body(db.collection(target.collection));
  } finally {
    await client.close();
  }
}

function list(collection: Collection<Document>, target: Target): Promise<ListedLock[]> {
  return target.resources ? listResourceLocks(collection, { all: target.all }) : listDocumentLocks(collection, target.field, { all: target.all });
}

/** The field the locks are stored under: `--field`, or the one resource locks use. */
const lockField = (target: Target): string => (target.resources ? RESOURCE_FIELD : target.field);

/** Which entry a row is: one acquisition (a lock id that lets go and locks again is another entry), in one state. */
const identity = (row: ListedLock): string => `${show(row.target)}|${row.tag}|${row.lockId}|${row.entryId ?? ''}|${row.state}`;

/** `_id` as typed: JSON/EJSON (`42`, `{"$oid":"…"}`) when it parses, else the string. */
function parseId(text: string): unknown {
  try {
    return EJSON.parse(text, { relaxed: true });
  } catch {
    return text;
  }
}

/** How a target prints: a string bare unless it would read as another value (`"42"`), anything else as relaxed EJSON (`42`, `{"$oid":"…"}`). */
const show = (value: unknown): string => (typeof value === 'string' && parseId(value) === value ? value : EJSON.stringify(value, { relaxed: true }));
/** The same `_id` exactly, types included (`42` is not `"42"`). */
const sameId = (a: unknown, b: unknown): boolean => EJSON.stringify(a, { relaxed: false }) === EJSON.stringify(b, { relaxed: false });

/** The rows as JSON values (`target` as relaxed EJSON). */
const jsonRows = (rows: ListedLock[]): unknown[] => rows.map((row) => ({ ...row, target: EJSON.serialize({ v: row.target }, { relaxed: true }).v }));

/** A table of `rows`, or one JSON document per call with `json`. */
function render(rows: ListedLock[], json: boolean | undefined): string {
  if (json) return JSON.stringify(jsonRows(rows), null, 2);
  if (rows.length === 0) return 'no locks';
  // Elections (the tag `leader`) are marked, and their leaders' values shown, in a last column only when there is one.
  const elections = rows.some((row) => row.election);
  const header = ['TARGET', 'TAG', 'STATE', 'LOCK ID', 'DOC FENCE', 'SINCE', 'EXPIRES (server)', 'LEFT', 'OWNER', 'HOLDS', 'PERMITS (used/limit)', ...(elections ? ['LEADER VALUE'] : [])];
  const cells = rows.map((row) => [
    show(row.target),
    row.election ? `${row.tag} (election)` : row.tag,
    row.state,
    row.lockId,
    row.documentFence === null ? '-' : String(row.documentFence),
    row.since.toISOString(),
    row.expiresAt ? row.expiresAt.toISOString() : 'never',
    row.remainingMs < 0 ? '-' : `${(row.remainingMs / 1000).toFixed(1)} s`,
    row.owner ?? '-',
    row.holds === undefined ? '-' : String(row.holds),
    row.permits ? `${row.permits.taken} (${row.permits.used}/${row.permits.limit ?? '?'})` : '-',
    ...(elections ? [row.election ? EJSON.stringify(row.election.value, { relaxed: true }) : '-'] : []),
  ]);
  return textTable(header, cells).join('\n');
}

async function status(target: Target): Promise<void> {
  const [rows, streams, marks] = await withCollection(target, async (collection) => {
    if (!target.all) await hintIndex(collection, lockField(target));
    const marks = target.resources ? [] : await listQuarantines(collection, target.field);
    return [await list(collection, target), target.streams ? await readLockStreams(collection, lockField(target)) : undefined, marks] as const;
  });
  if (!streams) console.log(withQuarantines(render(rows, target.json), marks, target.json, show));
  else console.log(target.json ? JSON.stringify({ locks: jsonRows(rows), streams, ...(marks.length > 0 && { quarantined: marks }) }, null, 2) : withQuarantines(`${render(rows, false)}\n\n${renderStreams(streams)}`, marks, false, show));
}

/** How many documents a collection holds before reading all of them for a listing is worth an index. */
const INDEX_WORTH_FROM = 10_000;

/**
 * Says on stderr which index lets a listing read only the documents that may hold a lock, when it
 * is missing or indexes every document, and the collection is large enough for that to matter
 * (a hint on every call over a small collection is noise; `doctor` reports it whatever the size).
 */
async function hintIndex(collection: Collection<Document>, field: string): Promise<void> {
  const found = untilIndexOf(await collection.indexes(), field);
  if (found?.kind === 'partial' || (await collection.estimatedDocumentCount()) < INDEX_WORTH_FROM) return;
  const partial = suggestedIndexCommand(field);
  if (!found) console.error(`hint: without an index on ${field}.until (${partial}), status reads every document that was ever locked`);
  else if (found.kind === 'full') console.error(`hint: the index ${found.name} on ${field}.until indexes every document; a partial one (${partial}) indexes only those that ever held a lock`);
}

/** Prints what changed between two listings: `-` released or expired, `+` acquired or queued, `~` extended. */
function changes(before: Map<string, ListedLock>, after: Map<string, ListedLock>): string[] {
  const lines: string[] = [];
  const at = new Date().toISOString();
  const describe = (row: ListedLock): string => `${show(row.target)} ${row.tag} ${row.state} ${row.lockId}${row.documentFence === null ? '' : ` doc fence ${row.documentFence}`}`;
  for (const [key, row] of before) if (!after.has(key)) lines.push(`${at} - ${describe(row)}`);
  for (const [key, row] of after) {
    const old = before.get(key);
    if (!old) lines.push(`${at} + ${describe(row)}`);
    else if (old.expiresAt?.getTime() !== row.expiresAt?.getTime()) lines.push(`${at} ~ ${describe(row)} until ${row.expiresAt?.toISOString() ?? 'never'}`);
  }
  return lines;
}

async function watch(target: Target & { interval: number }): Promise<void> {
  await withCollection(target, async (collection) => {
    const keyed = (rows: ListedLock[]): Map<string, ListedLock> => new Map(rows.map((row) => [identity(row), row]));
    if (!target.all) await hintIndex(collection, lockField(target));
    let seen = keyed(await list(collection, target));
    console.log(render([...seen.values()], target.json));
    const streams = target.streams ? streamWatcher(collection, lockField(target)) : undefined;
    if (streams) console.log(target.json ? JSON.stringify(await streams.first(), null, 2) : renderStreams(await streams.first()));
    let stopped = false;
    let wake: (() => void) | undefined;
    const stop = (): void => {
      stopped = true;
      wake?.();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    // Change streams (a replica set) wake the loop at once; polling catches expiries, and is all there is elsewhere.
    const hello = await collection.db.admin().command({ isMaster: 1 });
    const stream = typeof hello.setName === 'string' ? collection.watch([], { batchSize: 1 }) : undefined;
    stream?.on('change', () => wake?.());
    stream?.on('error', () => undefined);
    console.error(`watching ${target.db}.${target.collection} (${stream ? 'change stream' : `polling every ${target.interval} ms`}); Ctrl-C stops`);
    try {
      while (!stopped) {
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, target.interval);
        });
        if (stopped) break;
        const now = keyed(await list(collection, target));
        for (const line of [...changes(seen, now), ...((await streams?.changes()) ?? [])]) console.log(line);
        seen = now;
      }
    } finally {
      await stream?.close();
    }
  });
}

async function confirm(question: string): Promise<boolean> {
  if (!process.stdin.isTTY) throw new CliError('refusing to release without confirmation: stdin is not a terminal; pass --yes', 2);
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(`${question} [y/N] `)).trim());
  } finally {
    prompt.close();
  }
}

async function release(target: Target & { id?: string; doc?: string; tag?: string; yes?: boolean; quarantine?: boolean }): Promise<void> {
  if (target.quarantine) return releaseQuarantine(target, (body) => withCollection(target, body), confirm, parseId, show);
  if ((target.id === undefined) === (target.doc === undefined)) throw new CliError('release needs --id <lockId>, or --doc <_id> with --tag <tag>', 2);
  if (target.doc !== undefined && target.tag === undefined) throw new CliError('release --doc needs --tag <tag>', 2);
  if (target.resources && target.id === undefined) throw new CliError('resource locks are released by --id <lockId>', 2);
  await withCollection(target, async (collection) => {
    // By --doc: that document is read by its _id (whatever else the collection holds); by --id: among the locks held now.
    const rows =
      target.id !== undefined
        ? (await list(collection, target)).filter((row) => row.lockId === target.id && row.state !== 'upgrading')
        : (await documentLocks(collection, target.field, parseId(target.doc!))).filter((row) => sameId(row.target, parseId(target.doc!)) && row.tag === target.tag && (row.state === 'held' || row.state === 'kept'));
    if (rows.length === 0) throw new CliError(target.id !== undefined ? `no lock with id ${target.id}` : `no ${target.tag} lock on document ${target.doc}`);
    console.log(render(rows, target.json));
    if (!target.yes && !(await confirm(`Release ${rows.length === 1 ? 'this lock' : `these ${rows.length} locks`}? Their holders lose them.`))) throw new CliError('not released');
    // Exactly the entries shown, each by its own id: never what their lock id holds by the time of the answer.
    const paths = new LockPaths(lockField(target));
    let released = 0;
    for (const row of rows) {
      // A lock entry is withdrawn from its tag while it is live (one whose lease ended since was let go); a fair-mode ticket from the queue.
      const { filter, update } = row.state === 'waiting' ? dropTicketOperation(paths, { _id: row.target }, row.lockId) : withdrawLiveOperation(paths, { _id: row.target }, row.tag, row.entryId ?? row.lockId);
      const result = await collection.updateOne(filter, update, { writeConcern: { w: 'majority' } });
      released += result.modifiedCount;
    }
    const gone = rows.length - released;
    if (gone > 0) {
      const since = target.id === undefined ? '' : await takenSince(collection, target, rows);
      if (released === 0) throw new CliError(`nothing released: ${rows.length === 1 ? 'the lock shown was' : `the ${rows.length} locks shown were`} let go before the confirmation${since}`);
      console.error(`${gone} of the ${rows.length} locks shown had been let go before the confirmation${since}`);
    }
    console.log(`released ${released} ${target.resources ? 'resource ' : ''}lock(s)`);
  });
}

/** What lock id `--id` holds now that was not among the `shown` rows (it took them since), as a clause of a message. */
async function takenSince(collection: Collection<Document>, target: Target & { id?: string }, shown: ListedLock[]): Promise<string> {
  const seen = new Set(shown.map((row) => identity(row)));
  const since = (await list(collection, target)).filter((row) => row.lockId === target.id && !seen.has(identity(row)));
  return since.length === 0 ? '' : `; lock id ${target.id} now holds ${since.length} lock(s) taken after the listing, left held: ${since.map((row) => `${show(row.target)} ${row.tag}`).sort().join(', ')}`;
}

/** `--interval`: a whole number of ms, at least 1 (0 would poll without pause). */
function interval(value: string): number {
  const ms = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(ms) || ms < 1) throw new InvalidArgumentError('expected a whole number of ms, at least 1');
  return ms;
}

const STREAMS_HELP = "also list the processes waiting through monglock's change stream ($currentOp: needs the inprog privilege)";

/** The command line, as a commander program (exported for tests). */
export function program(): Command {
  // exitOverride first: subcommands copy it when they are created.
  const root = new Command('monglock').exitOverride().version(VERSION).description('See and operate monglock locks in a MongoDB collection').showHelpAfterError();
  const common = (command: Command): Command =>
    collectionOptions(command)
      .option('--resources', 'a resourceLocks() collection instead of document locks')
      .option('--json', 'JSON instead of a table');
  common(root.command('status').description('list held and waiting locks'))
    .option('--all', 'include expired entries nobody released')
    .option('--streams', STREAMS_HELP)
    .action((options: Target) => status(options));
  common(root.command('watch').description('show lock changes live (change streams on a replica set, else polling)'))
    .option('--interval <ms>', 'polling interval (ms, at least 1)', interval, 1_000)
    .option('--streams', `${STREAMS_HELP}, and those that come and go`)
    .action((options: Target & { interval: number }) => watch(options));
  common(root.command('release').description('force-release one lock by id, or one document tag; or clear a quarantine mark'))
    .option('--id <lockId>', 'the lock id (or a fair-mode ticket id)')
    .option('--doc <_id>', 'the document _id (JSON/EJSON, else a string)')
    .option('--tag <tag>', "the tag to release on --doc ('write' for a writeLock)")
    .option('--quarantine', 'clear the quarantine mark of --doc (it can be acquired again)')
    .option('-y, --yes', 'do not ask for confirmation')
    .action((options: Target & { id?: string; doc?: string; tag?: string; yes?: boolean; quarantine?: boolean }) => release(options));
  doctorCommand(root.command('doctor'), withCollection);
  return root;
}

export async function main(): Promise<void> {
  const root = program();
  try {
    await root.parseAsync(process.argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version exit 0; usage errors were printed by commander.
      process.exitCode = error.exitCode === 0 ? 0 : 2;
      return;
    }
    console.error(`monglock: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = error instanceof CliError ? error.exitCode : 1;
  }
}

