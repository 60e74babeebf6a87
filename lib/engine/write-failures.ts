import { BSON } from 'mongodb';
import { AbandonedAttemptError, UnsentCommandError } from './deadlines';
import { lockError, type BoomLike } from '../common/errors';

/**
 * What a failed write tells about the document: whether the server can have applied it (or still
 * apply it later). Only `unknown` means a lock may have been written (or a commit applied):
 * - `refused`: the server answered with one of the errors that prove the command wrote nothing
 *   ({@link REFUSED_CODES}: its values refused when parsed, or its update refused when applied to
 *   the document: `$inc` of a string, a duplicate key, document validation). A retry of the driver
 *   after a lost first reply proves the same of the first attempt: a refusal while parsing would
 *   have met it too, and a retried write whose first attempt landed is answered with that
 *   attempt's outcome, not executed again. Every other server error (an unauthorized retry, a rate
 *   limit, a shutdown, an error this library does not know) may be a retry's answer after a first
 *   attempt that landed: `unknown`.
 * - `not-sent`: the driver refused it before sending (an invalid argument, a value BSON cannot
 *   serialize: shown by serializing the command again, see {@link locateFailure}).
 * - `closed`: the client was closed before the call (`MongoNotConnectedError`): nothing was sent.
 * - `unsent`: its deadline passed while it waited for one of its client's lock command slots
 *   ({@link UnsentCommandError}): it was never handed to the driver, so nothing can land.
 * - `unknown`: a network error, a lost or late reply (the client-side deadline), a reply the driver
 *   could not decode (a `BSONError` thrown after the command ran), a write concern
 *   error (the write was applied but not confirmed as asked), an error that may come from the
 *   driver's retry of a write whose first reply was lost, or a client closed while the command
 *   awaited its reply or its retry (`MongoClientClosedError`, `MongoTopologyClosedError`,
 *   `MongoPoolClosedError`: the server may have applied the first attempt).
 */
export type WriteFailure = 'refused' | 'not-sent' | 'closed' | 'unsent' | 'unknown';

/** Driver errors thrown before a command is sent. */
const NOT_SENT = new Set(['MongoInvalidArgumentError', 'MongoAPIError', 'MongoParseError', 'MongoCompatibilityError', 'MongoMissingDependencyError']);
/**
 * Errors thrown while serializing a command, before it is sent, and as well while decoding its
 * reply, after it ran (UTF-8 validation is on by default, and a document another driver wrote
 * can hold invalid UTF-8): `BSONError`, `BSONVersionError`, and any `TypeError` or `RangeError`.
 */
const BSON_ERRORS = new Set(['BSONError', 'BSONVersionError']);
/** Such errors of commands that serialize ({@link locateFailure}): thrown after sending. */
const afterSending = new WeakSet<Error>();

function thrownWhileSerializingOrDecoding(error: Error): boolean {
  return BSON_ERRORS.has(error.name) || error instanceof TypeError || error instanceof RangeError;
}

/**
 * Tells where the driver threw `error`, a failure of the command made of `parts` (its filter,
 * update, projection…; undefined: not known): a `BSONError` (or `TypeError`, `RangeError`) of a
 * command that serializes was thrown after sending, decoding the reply of a command that may have
 * run, and {@link classifyWriteFailure} says `unknown` of it; only one of a command that does not
 * serialize again says `not-sent`. Serializes only on such a failure, never on the way out.
 * Returns `error`.
 */
export function locateFailure(error: unknown, parts: readonly unknown[] | undefined): unknown {
  if (error instanceof Error && thrownWhileSerializingOrDecoding(error) && (parts === undefined || serializes(parts))) afterSending.add(error);
  return error;
}

function serializes(parts: readonly unknown[]): boolean {
  try {
    BSON.serialize({ parts });
    return true;
  } catch {
    return false;
  }
}
/**
 * Driver errors of a client that was closed before the call: raised before any attempt is sent.
 * Not `MongoClientClosedError` (the driver fails the commands already sent with it when the client
 * closes), nor `MongoTopologyClosedError`/`MongoPoolClosedError`: a retryable write selects a
 * server and checks out a connection again for its retry, after a first attempt that may have
 * been applied, and a client closed meanwhile fails that retry with them.
 */
const CLOSED = new Set(['MongoNotConnectedError']);
/**
 * Server error codes that prove a write wrote nothing, and only those: raised while parsing the
 * command's values, or while applying its update to the document (which a retry of a landed write
 * never does). 2 BadValue, 9 FailedToParse, 14 TypeMismatch, 15 Overflow, 16 InvalidLength,
 * 22 InvalidBSON, 28 PathNotViable, 30 InvalidPath, 40 ConflictingUpdateOperators,
 * 52 DollarPrefixedFieldName, 53 InvalidIdField, 54 NotSingleValueField, 55 InvalidDBRef,
 * 56 EmptyFieldName, 57 DottedFieldName, 66 ImmutableField, 72 InvalidOptions,
 * 121 DocumentValidationFailure, 168 InvalidPipelineOperator, 10334 BSONObjectTooLarge,
 * 11000/11001 DuplicateKey, 17419 (a document larger than 16 MB after the update).
 */
const REFUSED_CODES = new Set([2, 9, 14, 15, 16, 22, 28, 30, 40, 52, 53, 54, 55, 56, 57, 66, 72, 121, 168, 10334, 11000, 11001, 17419]);

/** Classifies a failed write (see {@link WriteFailure}). */
export function classifyWriteFailure(error: unknown): WriteFailure {
  if (!(error instanceof Error)) return 'unknown';
  if (error instanceof UnsentCommandError || error instanceof AbandonedAttemptError) return 'unsent';
  if (NOT_SENT.has(error.name)) return 'not-sent';
  if (thrownWhileSerializingOrDecoding(error)) return afterSending.has(error) ? 'unknown' : 'not-sent';
  if (CLOSED.has(error.name)) return 'closed';
  if (error.name !== 'MongoServerError') return 'unknown';
  const failed = error as Error & { code?: unknown; writeConcernError?: unknown; errorLabels?: unknown; hasErrorLabel?: (label: string) => boolean };
  if (failed.writeConcernError !== undefined) return 'unknown';
  if (failed.hasErrorLabel?.('RetryableWriteError')) return 'unknown';
  return typeof failed.code === 'number' && REFUSED_CODES.has(failed.code) ? 'refused' : 'unknown';
}

/** True when `error` (a lock call's `DbError`, or the driver's) says its command was never sent: it waited past its deadline in its client's queue, and nothing was written. */
export function neverSent(error: unknown): boolean {
  return classifyWriteFailure(error) === 'unsent' || (error instanceof Error && error.cause !== undefined && classifyWriteFailure(error.cause) === 'unsent');
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
    case 'unsent':
      return `it was never sent: nothing was written`;
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

/**
 * The `DbError` of a release whose write failed (`error`, a `DbError` with the driver's error as
 * its cause): what it left behind, in words. A release that surely wrote nothing (a closed client,
 * a refused command) leaves the lock held until its lease ends; one whose reply was lost may have
 * released it or not.
 */
export function failedRelease(error: Error, boom: BoomLike | undefined): Error {
  const cause = error.cause ?? error;
  const message = cause instanceof Error ? cause.message : String(cause);
  const failure = classifyWriteFailure(cause);
  const left = failure === 'unknown' ? 'the release may not have landed: the lock may stay held until its lease ends' : `${describeWriteFailure(failure, 'release')}; the lock stays held until its lease ends`;
  return lockError('DbError', boom, { cause, detail: `${message} (${left})` });
}
