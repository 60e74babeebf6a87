import { BSON, type Collection, type Document } from 'mongodb';
import { clearQuarantineOperation, hasQuarantineMark, liveQuarantine } from '../../protocol/quarantine';
import { LockPaths } from '../../protocol/stored-format';
import { CliError } from './cli-error';
import { listingMatch, serverTime } from './lock-listing';
import { textTable } from './text-table';

/** A quarantined document, as `monglock status` lists it. */
export interface ListedQuarantine {
  readonly target: unknown;
  readonly state: 'quarantined';
  readonly reason: string;
  /** When the mark was set, by the server's clock. */
  readonly since: Date;
  /** When it ends, by the server's clock; null: when it is cleared. */
  readonly until: Date | null;
  /** The id of the lock whose holder set it. */
  readonly by: string;
}

/**
 * The documents of `collection` (those `only` selects) whose quarantine mark under `field` is live
 * by the server's clock (`$$NOW`, read with them), or with `all` every mark; read on the primary.
 * The live ones are read by `<field>.until` (a mark raises it to its end), which the index
 * `status` suggests serves; `all` reads every document that has a mark.
 */
export async function listQuarantines(collection: Collection<Document>, field: string, only: Document = {}, all = false): Promise<ListedQuarantine[]> {
  const paths = new LockPaths(field);
  // A mark raises the document's `until` to its end: a live one is among the documents whose `until` has not passed (the index the locks' listing reads by).
  const live = all ? {} : listingMatch(field, await serverTime(collection));
  const docs = await collection.aggregate([{ $match: { ...only, ...live, ...hasQuarantineMark(paths) } }, { $project: { [`${field}.quarantine`]: 1, now: '$$NOW' } }], { readPreference: 'primary' }).toArray();
  return docs.flatMap((doc) => {
    const stored = paths.read(doc);
    const mark = all ? stored.quarantine : liveQuarantine(stored, (doc.now as Date).getTime());
    return mark ? [{ target: doc._id, state: 'quarantined' as const, reason: mark.reason, since: mark.since, until: mark.until instanceof Date ? mark.until : null, by: mark.by }] : [];
  });
}

/** `listing` (the locks, as printed) followed by the live quarantine marks: a second table, or more rows of the JSON array. Unchanged without marks. */
export function withQuarantines(listing: string, marks: readonly ListedQuarantine[], json: boolean | undefined, show: (value: unknown) => string): string {
  if (marks.length === 0) return listing;
  if (json) return JSON.stringify([...(JSON.parse(listing) as unknown[]), ...marks.map((mark) => ({ ...mark, target: BSON.EJSON.serialize({ v: mark.target }, { relaxed: true }).v }))], null, 2);
  return `${listing}\n\n${renderQuarantines(marks, show)}`;
}

function renderQuarantines(marks: readonly ListedQuarantine[], show: (value: unknown) => string): string {
  const cells = marks.map((mark) => [show(mark.target), mark.since.toISOString(), mark.until ? mark.until.toISOString() : 'until cleared', mark.by, mark.reason]);
  return textTable(['QUARANTINED', 'SINCE', 'UNTIL (server)', 'BY LOCK', 'REASON'], cells).join('\n');
}

/** What `release --quarantine` needs from the command line. */
export interface QuarantineRelease {
  readonly field: string;
  readonly doc?: string;
  readonly id?: string;
  readonly tag?: string;
  readonly resources?: boolean;
  readonly yes?: boolean;
  readonly json?: boolean;
}

/**
 * `monglock release --doc <_id> --quarantine`: shows the document's quarantine mark (live or
 * ended), asks for confirmation (unless `--yes`), and removes it in one update at majority
 * ({@link clearQuarantineOperation}).
 */
export async function releaseQuarantine(
  target: QuarantineRelease,
  use: <T>(body: (collection: Collection<Document>) => Promise<T>) => Promise<T>,
  confirm: (question: string) => Promise<boolean>,
  parseId: (text: string) => unknown,
  show: (value: unknown) => string,
): Promise<void> {
  if (target.id !== undefined || target.tag !== undefined) throw new CliError('release --quarantine clears a document\'s mark: it takes --doc <_id>, not --id or --tag', 2);
  if (target.doc === undefined || target.resources) throw new CliError('release --quarantine needs --doc <_id> (a document of writeLock/multiLock/semaphore locks)', 2);
  const id = parseId(target.doc);
  await use(async (collection) => {
    const marks = await listQuarantines(collection, target.field, { _id: id }, true);
    if (marks.length === 0) throw new CliError(`no quarantine mark on document ${target.doc}`);
    console.log(withQuarantines(target.json ? '[]' : 'quarantine mark:', marks, target.json, show));
    if (!target.yes && !(await confirm('Clear this quarantine mark? The document can be acquired again.'))) throw new CliError('not cleared');
    const { filter, update } = clearQuarantineOperation(new LockPaths(target.field), { _id: id });
    const result = await collection.updateOne(filter, update, { writeConcern: { w: 'majority' } });
    if (result.modifiedCount === 0) throw new CliError('nothing cleared: the mark was removed before the confirmation');
    console.log(`cleared the quarantine mark of document ${show(id)}`);
  });
}
