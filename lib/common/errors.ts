/** The HTTP-flavoured category of a lock outcome; also the name of the boom helper that builds it. */
export type LockErrorType = 'notFound' | 'conflict' | 'badImplementation';

/** monglock v2's outcome names, spelling included (`RessourceNotFound` is public API). */
export type LockErrorSubtype =
  | 'RessourceNotFound'
  | 'LockAlreadyTaken'
  | 'LockWasReacquired'
  | 'CooperativeLock'
  | 'AssertiveLock'
  | 'LockNotFound'
  | 'DbError'
  | 'MaxHoldExceeded'
  | 'SemaphoreFull'
  | 'LimitMismatch'
  | 'TooManyHolds'
  | 'UpgradeConflict'
  | 'Quarantined';

/** The subtype of a refused acquisition: writeLock's, multiLock's, or a semaphore's. */
export type ConflictSubtype = 'LockAlreadyTaken' | 'CooperativeLock' | 'SemaphoreFull';

const TYPES: Readonly<Record<LockErrorSubtype, { type: LockErrorType; statusCode: number }>> = {
  RessourceNotFound: { type: 'notFound', statusCode: 404 },
  LockAlreadyTaken: { type: 'conflict', statusCode: 409 },
  LockWasReacquired: { type: 'conflict', statusCode: 409 },
  CooperativeLock: { type: 'conflict', statusCode: 409 },
  AssertiveLock: { type: 'conflict', statusCode: 409 },
  LockNotFound: { type: 'conflict', statusCode: 409 },
  DbError: { type: 'badImplementation', statusCode: 500 },
  MaxHoldExceeded: { type: 'badImplementation', statusCode: 500 },
  SemaphoreFull: { type: 'conflict', statusCode: 409 },
  LimitMismatch: { type: 'conflict', statusCode: 409 },
  TooManyHolds: { type: 'conflict', statusCode: 409 },
  UpgradeConflict: { type: 'conflict', statusCode: 409 },
  Quarantined: { type: 'conflict', statusCode: 409 },
};

/**
 * The part of a boom module (`@hapi/boom`, or the older `boom`) that monglock calls. The caller
 * passes its own module; monglock never imports boom.
 */
export interface BoomLike {
  notFound(message?: string, data?: unknown): Error;
  conflict(message?: string, data?: unknown): Error;
  badImplementation(message?: string, data?: unknown): Error;
}

/** What a failed lock call carries besides its subtype. */
export interface LockErrorDetails {
  /** Human-readable detail, added to `message` (never to a boom message, which stays the subtype). */
  readonly detail?: string;
  /** Extra data; with boom it becomes `err.data` (never sent to HTTP clients). */
  readonly data?: unknown;
  /** The underlying failure (the driver error for `DbError`). */
  readonly cause?: unknown;
  /** The registered lock, for `AssertiveLock`: call `acquire(filter, { lock })` with it. */
  readonly lock?: unknown;
}

/** Fields that every lock outcome error has, whether it is a {@link LockError} or a boom error. */
export interface LockErrorFields {
  readonly type: LockErrorType;
  readonly subtype: LockErrorSubtype;
  readonly lock?: unknown;
}

/**
 * A lock outcome that is not a success: the document is missing (404), the lock is held or lost
 * (409), or MongoDB failed (500). Misuse (bad options or arguments) is never a LockError but a
 * `TypeError`/`RangeError`, thrown before anything is written.
 */
export class LockError extends Error implements LockErrorFields {
  override readonly name = 'LockError';
  readonly type: LockErrorType;
  readonly subtype: LockErrorSubtype;
  readonly statusCode: number;
  readonly data: unknown;
  /** The registered lock, for `AssertiveLock`. */
  readonly lock?: unknown;

  constructor(subtype: LockErrorSubtype, details: LockErrorDetails = {}) {
    super(details.detail ? `${subtype}: ${details.detail}` : subtype, { cause: details.cause });
    const { type, statusCode } = TYPES[subtype];
    this.type = type;
    this.subtype = subtype;
    this.statusCode = statusCode;
    this.data = details.data;
    if (details.lock !== undefined) this.lock = details.lock;
  }
}

/**
 * Builds the error for a lock outcome: a {@link LockError}, or with a caller-supplied boom
 * `boom[type](subtype, data)` decorated with the same `type`, `subtype`, `lock` and `cause`, so
 * that code reading either shape works and hapi answers 404/409/500 with the subtype as message.
 */
export function lockError(
  subtype: LockErrorSubtype,
  boom: BoomLike | undefined,
  details: LockErrorDetails = {},
): Error & LockErrorFields {
  if (!boom) return new LockError(subtype, details);
  const { type } = TYPES[subtype];
  const data = details.lock !== undefined ? details.lock : details.data;
  const err = boom[type](subtype, data) as Error & Record<string, unknown>;
  Object.assign(err, { type, subtype });
  if (details.lock !== undefined) err.lock = details.lock;
  if (details.cause !== undefined) {
    Object.defineProperty(err, 'cause', { value: details.cause, writable: true, configurable: true });
  }
  return err as unknown as Error & LockErrorFields;
}

/**
 * True when `err` is a lock outcome (a {@link LockError} or a boom error made by monglock),
 * optionally of the given subtype.
 * @example
 * if (isLockError(err, 'LockAlreadyTaken')) retryLater();
 */
export function isLockError(err: unknown, subtype?: LockErrorSubtype): err is Error & LockErrorFields {
  if (!(err instanceof Error)) return false;
  const candidate = (err as Partial<LockErrorFields>).subtype;
  if (typeof candidate !== 'string' || !Object.hasOwn(TYPES, candidate)) return false;
  if ((err as Partial<LockErrorFields>).type !== TYPES[candidate as LockErrorSubtype].type) return false;
  return subtype === undefined || candidate === subtype;
}

/**
 * Runs a database step: a driver failure or deadline becomes `DbError` with the failure as
 * `cause`; lock outcomes pass through unchanged.
 */
export async function withDbErrors<T>(boom: BoomLike | undefined, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (isLockError(error)) throw error;
    throw lockError('DbError', boom, { cause: error, detail: error instanceof Error ? error.message : String(error) });
  }
}
