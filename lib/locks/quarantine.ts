import type { Document } from 'mongodb';
import { withDbErrors } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { FIXED_PER_LOCK, readParams, type CallOptions, type UpdateParams } from '../common/options';
import { describe, expectFilter } from '../common/validation';
import type { LockData, TagRule } from '../protocol/lock-data';
import { clearQuarantineOperation, quarantineUpdate, type QuarantineMark } from '../protocol/quarantine';
import type { DocumentLock } from './document-lock';

/** Per-call options of `handle.quarantine(params)`. */
export interface QuarantineParams<TSchema extends Document = Document> extends Pick<CallOptions, 'timeout' | 'boom'>, Omit<UpdateParams<TSchema>, 'session'> {
  /** Why the document is quarantined (a non-empty string): every refused acquisition carries it as `err.data.reason`. */
  readonly reason: string;
  /** When the mark ends, by the server's clock. @default none: only `clearQuarantine(filter)` (or `monglock release --quarantine`) ends it */
  readonly until?: Date;
}

/** The keys of {@link QuarantineParams}. */
export const QUARANTINE_PARAMS = knownKeys<QuarantineParams>()(['reason', 'until', 'update', 'match', 'arrayFilters', 'timeout', 'boom'], {
  ...FIXED_PER_LOCK,
  session: 'a quarantine joins no transaction: its mark must be seen by every acquirer at once',
  w: 'a quarantine is written at `majority`, as a commit is',
  releaseW: 'a quarantine is written at `majority`, as a commit is',
  lock: 'a handle quarantines itself: `handle.quarantine({ reason })`',
  locktimeout: 'a quarantine ends the hold: it takes no lease (the mark ends at `until`)',
});

/** Per-call options of `clearQuarantine(filter, params)`. */
export type ClearQuarantineParams = Pick<CallOptions, 'timeout' | 'w' | 'boom'>;

/** The keys of {@link ClearQuarantineParams}. */
export const CLEAR_QUARANTINE_PARAMS = knownKeys<ClearQuarantineParams>()(['timeout', 'w', 'boom'], FIXED_PER_LOCK);

/** The mark `params` asks for, and what the release that sets it takes (the caller's update and call options), validated before anything is written. */
export function readQuarantine(rule: TagRule, lock: LockData, params: unknown): { mark: QuarantineMark; release: Record<string, unknown> } {
  if (!rule.exclusive) {
    const kind = rule.limit === undefined ? `tag \`${rule.tag}\` is shared` : `tag \`${rule.tag}\` is a semaphore's (it has a limit)`;
    throw new TypeError(`Only a lock that holds its document alone is quarantined (a writeLock, or a multiLock tag cooperative with itself): ${kind}`);
  }
  if (lock.owner !== undefined) throw new TypeError(`Expected a lock without an owner: owner \`${lock.owner}\`'s reentrant hold may be one of several nested holds, and is not quarantined`);
  const { reason, until, ...release } = readParams('params', params, QUARANTINE_PARAMS, false);
  if (typeof reason !== 'string' || reason.trim() === '') throw new TypeError(`Expected \`params.reason\` to be a non-empty string, got ${describe(reason)}`);
  expectUntil('params.until', until);
  return { mark: { reason, by: lock.id, ...(until instanceof Date && { until }) }, release };
}

/**
 * Ends the hold of `lock` with a quarantine mark, in one write: the lock's commit (its release with
 * the caller's `update`, at majority, settled if its reply is lost) with the mark merged into it,
 * so the mark lands only while the lock is held, together with the update and the release.
 */
export function quarantineHold(core: DocumentLock, target: Document, lock: LockData, params: unknown): Promise<void> {
  return core.run(async () => {
    const { mark, release } = readQuarantine(core.engine.rule(lock.tag), lock, params);
    await core.releaseWith(target, lock.tag, { id: lock.id }, lock, release, undefined, quarantineUpdate(core.engine.paths, mark));
  });
}

/** The `clearQuarantine(filter, params?)` method of a document lock: resolves whether a mark was removed (one update). */
export function clearQuarantineMethod(core: DocumentLock): (filter: unknown, params: unknown) => Promise<boolean> {
  return (filter, params) =>
    core.run(async () => {
      const target = expectFilter('filter', filter);
      const { call } = core.callOptions(readParams('params', params, CLEAR_QUARANTINE_PARAMS));
      return withDbErrors(call.boom, () => core.engine.store.applyOne(clearQuarantineOperation(core.engine.paths, target), call));
    });
}

/** Options of {@link quarantine}: what `handle.quarantine` takes besides the reason, and the value `using()` resolves. */
export interface QuarantineOptions<T = undefined, TSchema extends Document = Document> extends Omit<UpdateParams<TSchema>, 'session'> {
  /** When the mark ends, by the server's clock. @default none: only `clearQuarantine(filter)` ends it */
  readonly until?: Date;
  /** What `using()` resolves once the mark is set. */
  readonly value?: T;
}

const QUARANTINE_OPTIONS = knownKeys<QuarantineOptions>()(['until', 'update', 'match', 'arrayFilters', 'value'], {
  session: 'a quarantine joins no transaction: its mark must be seen by every acquirer at once',
  reason: 'the reason is the first argument: `quarantine(reason, { until })`',
});

/** What a `using()` body returns to end its hold with a quarantine mark: made by {@link quarantine}. */
export class Quarantine<T = undefined, TSchema extends Document = Document> {
  /** @internal */
  constructor(
    readonly reason: string,
    readonly options: Omit<QuarantineOptions<T, TSchema>, 'value'>,
    readonly value: T,
  ) {}
}

/**
 * Ends a `using()` body's hold with a quarantine mark (see `handle.quarantine`): returned from the
 * body, it is applied by the hold's last write instead of its release (with `options.update`, as a
 * `commit()`'s), and `using()` resolves `options.value`. Only for a lock that holds its document
 * alone (a writeLock, a multiLock tag cooperative with itself). The reason and the options are
 * checked here, before anything is written.
 * @throws {TypeError} on a reason that is not a non-empty string, an `until` that is not a Date, an unknown option
 * @example
 * await jobs.using({ _id }, {}, async () => {
 *   try { await run(job); } catch (error) { return quarantine(String(error), { update: { $set: { state: 'failed' } } }); }
 * });
 */
export function quarantine<T = undefined, TSchema extends Document = Document>(reason: string, options?: QuarantineOptions<T, NoInfer<TSchema>>): Quarantine<T, TSchema> {
  if (typeof reason !== 'string' || reason.trim() === '') throw new TypeError(`Expected \`reason\` to be a non-empty string, got ${describe(reason)}`);
  const { value, ...rest } = readParams('options', options, QUARANTINE_OPTIONS);
  expectUntil('options.until', rest.until);
  return new Quarantine(reason, rest as Omit<QuarantineOptions<T, TSchema>, 'value'>, value as T);
}

/** Throws unless `value` is undefined or a valid Date. */
function expectUntil(name: string, value: unknown): void {
  if (value !== undefined && !(value instanceof Date && Number.isFinite(value.getTime()))) throw new TypeError(`Expected \`${name}\` to be a valid Date, got ${describe(value)}`);
}
