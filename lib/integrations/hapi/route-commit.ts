import type { Document } from 'mongodb';
import type { BoomLike } from '../../common/errors';
import { CommitAllRequest, CommitRequest, FOREIGN_COMMIT, isForeignCommit } from '../../locks/commit';
import { Quarantine } from '../../locks/quarantine';

/** What a locked route's handler asks to commit with the release. */
export interface RouteCommit {
  readonly request: CommitRequest<unknown, Document> | CommitAllRequest<unknown>;
  /** The handler's answer once the commit is applied: its value, or the response that carried the commit, now with the value. */
  answer(value: unknown): unknown;
}

/** The route's `json.replacer` (hapi's response serialization). */
export type JsonReplacer = ((key: string, value: unknown) => unknown) | Array<string | number>;

/** A hapi response object, as `h.response(source)` makes it (`_setSource`: how hapi itself replaces a source). */
interface ResponseObject {
  readonly source: unknown;
  readonly code: unknown;
  readonly _setSource?: (source: unknown) => void;
}

/**
 * The commit a handler's `result` asks for: `commit()`/`commitAll()` returned as is, or wrapped in
 * a response (`h.response(commit(update, value)).code(201)`, answered with its status and
 * headers). Undefined for any other result. Throws (a boom 500, nothing written) for a commit this
 * copy cannot apply or answer, which would otherwise be answered as JSON with nothing written.
 */
export function routeCommitOf(result: unknown, boom: BoomLike, replacer?: JsonReplacer): RouteCommit | undefined {
  const response = isResponseObject(result) ? result : undefined;
  const carried = response ? response.source : result;
  if (isForeignCommit(carried)) throw boom.badImplementation(`monglock: the handler returned ${FOREIGN_COMMIT}; nothing was written`);
  if (carried instanceof Quarantine) throw boom.badImplementation('monglock: a locked route does not end with quarantine(reason) (a using() body does); nothing was written, and its lock is released');
  if (!(carried instanceof CommitRequest || carried instanceof CommitAllRequest)) return undefined;
  expectSendable(carried.value, boom, replacer);
  if (!response) return { request: carried, answer: (value) => value };
  const setSource = response._setSource;
  if (typeof setSource !== 'function') throw boom.badImplementation('monglock: this hapi version cannot answer a commit inside h.response(): return commit(update, value) itself; nothing was written');
  return {
    request: carried,
    answer: (value) => {
      setSource.call(response, value);
      return response;
    },
  };
}

/** True for a hapi response object (`h.response()`), which a handler may return instead of a value. */
function isResponseObject(value: unknown): value is ResponseObject {
  return typeof value === 'object' && value !== null && 'source' in value && typeof (value as { code?: unknown }).code === 'function' && typeof (value as { takeover?: unknown }).takeover === 'function';
}

/**
 * Throws (a boom 500, before anything is written) unless `value` can be sent as hapi sends it
 * once the commit is applied: a string, a buffer, nothing, or JSON. Applied first and failing to
 * serialize, it would be answered 500 for an update that was applied. A stream is refused too:
 * hapi reads it after the commit's release, so its body would be read without the lock.
 */
function expectSendable(value: unknown, boom: BoomLike, replacer?: JsonReplacer): void {
  if (typeof value === 'object' && value !== null && typeof (value as { pipe?: unknown }).pipe === 'function') {
    throw boom.badImplementation("monglock: a commit's value cannot be a stream (hapi would read it after the commit released the lock): read it into memory first; nothing was written");
  }
  const json = typeof value === 'bigint' || (typeof value === 'object' && value !== null && !Buffer.isBuffer(value));
  if (!json) return;
  try {
    JSON.stringify(value, replacer as never);
  } catch (error) {
    throw boom.badImplementation(`monglock: the commit's value cannot be sent as JSON (${String(error)}); nothing was written`);
  }
}
