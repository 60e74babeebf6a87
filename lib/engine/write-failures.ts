import { lockError, type BoomLike } from '../common/errors';

/**
 * What a failed write tells about the document: whether the server can have applied it (or still
 * apply it later). Only `unknown` means a lock may have been written (or a commit applied):
 * - `refused`: the server answered with an error that rejects the command itself (a malformed
 *   filter, `$inc` of a string, a duplicate key): nothing was applied. A retry of the driver after
 *   a lost first reply would have met the same refusal, so the first attempt applied nothing either.
 * - `not-sent`: the driver refused it before sending (an invalid argument, a value BSON cannot
 *   serialize).
 * - `closed`: the client was closed before the call (`MongoNotConnectedError`): nothing was sent.
 * - `unknown`: a network error, a lost or late reply (the client-side deadline), a write concern
 *   error (the write was applied but not confirmed as asked), an error that may come from the
 *   driver's retry of a write whose first reply was lost, or a client closed while the command
 *   awaited its reply or its retry (`MongoClientClosedError`, `MongoTopologyClosedError`,
 *   `MongoPoolClosedError`: the server may have applied the first attempt).
 */
export type WriteFailure = 'refused' | 'not-sent' | 'closed' | 'unknown';

/** Driver errors thrown before a command is sent. */
const NOT_SENT = new Set(['MongoInvalidArgumentError', 'MongoAPIError', 'MongoParseError', 'MongoCompatibilityError', 'MongoMissingDependencyError', 'BSONError', 'BSONVersionError']);
/**
 * Driver errors of a client that was closed before the call: raised before any attempt is sent.
 * Not `MongoClientClosedError` (the driver fails the commands already sent with it when the client
 * closes), nor `MongoTopologyClosedError`/`MongoPoolClosedError`: a retryable write selects a
 * server and checks out a connection again for its retry, after a first attempt that may have
 * been applied, and a client closed meanwhile fails that retry with them.
 */
const CLOSED = new Set(['MongoNotConnectedError']);
/**
 * Server error codes that do not prove the write was refused: they may be a retry's answer after a
 * lost first reply (the driver's retryable codes), or arrive after the write was applied
 * (time limits, write concern; 217 and 225: the server can no longer tell whether a retried
 * write's first attempt ran).
 */
const INCONCLUSIVE_CODES = new Set([6, 7, 50, 64, 89, 91, 134, 189, 217, 225, 262, 9001, 10058, 10107, 11600, 11602, 13435, 13436]);

/** Classifies a failed write (see {@link WriteFailure}). */
export function classifyWriteFailure(error: unknown): WriteFailure {
  if (!(error instanceof Error)) return 'unknown';
  if (NOT_SENT.has(error.name) || error instanceof TypeError || error instanceof RangeError) return 'not-sent';
  if (CLOSED.has(error.name)) return 'closed';
  if (error.name !== 'MongoServerError') return 'unknown';
  const failed = error as Error & { code?: unknown; writeConcernError?: unknown; errorLabels?: unknown; hasErrorLabel?: (label: string) => boolean };
  if (failed.writeConcernError !== undefined) return 'unknown';
  if (failed.hasErrorLabel?.('RetryableWriteError')) return 'unknown';
  if (typeof failed.code !== 'number' || INCONCLUSIVE_CODES.has(failed.code)) return 'unknown';
  return 'refused';
}

/** True when a failed write may have been applied, or may still be: the caller may hold what it wrote. */
export function mayHaveWritten(error: unknown): boolean {
  return classifyWriteFailure(error) === 'unknown';
}

/** A sentence for the caller: what a failed write left behind. */
export function describeWriteFailure(failure: WriteFailure, what: string): string {
  switch (failure) {
    case 'refused':
      return `the server refused the command: nothing was written`;
    case 'not-sent':
      return `the driver refused the command before sending it: nothing was written`;
    case 'closed':
      return `the MongoDB client is closed: nothing was sent`;
    case 'unknown':
      return `the ${what} may have been written`;
  }
}

/**
 * The `DbError` of an acquisition whose write failed. When the server may have applied it (a lost
 * reply, a wtimeout, a dropped connection), it carries the lock the caller may hold (`err.lock`),
 * so that it can still be released; otherwise it says that nothing was written.
 */
export function failedAcquisition(error: unknown, boom: BoomLike | undefined, mayHold: unknown): Error {
  const message = error instanceof Error ? error.message : String(error);
  const failure = classifyWriteFailure(error);
  if (failure !== 'unknown') return lockError('DbError', boom, { cause: error, detail: `${message} (${describeWriteFailure(failure, 'lock')})` });
  return lockError('DbError', boom, { cause: error, detail: `${message} (the lock may have been written: release err.lock)`, lock: mayHold });
}
