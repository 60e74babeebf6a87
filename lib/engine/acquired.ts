import type { Document } from 'mongodb';
import { isLockError } from '../common/errors';
import type { LockData } from '../protocol/lock-data';
import { documentAsAsked } from './reply-projection';

/** A lock an acquisition wrote, with the filter that addresses its document (`{ _id }`). */
export interface Acquired {
  readonly lock: LockData;
  readonly target: Document;
  /**
   * For a lock whose write may still be on its way (its reply was lost): the server time after
   * which the write can no longer land. It can start on the server until its stamp plus the
   * tolerance the server checks it with ({@link startsBy}); a command blocked there (behind a
   * transaction, a prepare conflict, a full ticket queue) lands up to its `maxTimeMS`, the call's
   * `timeout`, later.
   */
  readonly landsBy?: number;
  /** For such a lock: the server time after which its write can no longer start (its stamp plus the tolerance): when it has usually landed. */
  readonly startsBy?: number;
  /** The server's clock when the write that set `lock.expiresAt` was applied (ms). */
  readonly appliedAt?: number;
  /** The locked document after the acquisition, when it was asked for (without the lock field, unless projected). */
  readonly document?: Document | undefined;
  /** A nested hold of an owner that held the lock already (it took no place in the fair queue). */
  readonly nested?: boolean;
}

/** When a write stamped `stamp` and checked within `tolerance` can no longer start, and no longer land (see {@link Acquired.landsBy}). */
export function landing(stamp: number, tolerance: number, call: { readonly timeout: number }): { startsBy: number; landsBy: number } {
  return { startsBy: stamp + tolerance, landsBy: stamp + tolerance + call.timeout };
}

/** An acquisition that registered a lock which still waits for the tags it is assertive over. */
export class AssertivePending implements Acquired {
  constructor(
    readonly lock: LockData,
    readonly target: Document,
    readonly blockedBy: readonly string[],
    readonly document?: Document,
  ) {}
}

/** The lock a failed acquisition may have written (its reply was lost), which its `DbError` carries. */
export function lockWrittenBy(error: unknown): Acquired | undefined {
  if (!isLockError(error, 'DbError')) return undefined;
  const lock = (error as { lock?: unknown }).lock;
  return typeof lock === 'object' && lock !== null && 'target' in lock && 'lock' in lock ? (lock as Acquired) : undefined;
}

/** The document (its `_id`) whose lock refused an acquisition, when an explanation read it: where to wait. */
const refusedDocuments = new WeakMap<object, unknown>();

/** Records that `error` reports a refusal by the document `documentId`; returns `error`. */
export function refusedBy(error: Error, documentId: unknown): Error {
  refusedDocuments.set(error, documentId);
  return error;
}

/** The `_id` of the document that refused the acquisition `error` reports, if it was read. */
export function refusedDocumentOf(error: unknown): unknown {
  return typeof error === 'object' && error !== null ? refusedDocuments.get(error) : undefined;
}

/**
 * `outcome` carrying the locked document, as the caller asked for it ({@link documentAsAsked}):
 * without what the reply carried only to address the document (the `shardKey` paths).
 */
export function withDocument(outcome: Acquired | AssertivePending, doc: Document, field: string, asked: Document | true | undefined, shardKey: readonly string[] = []): Acquired | AssertivePending {
  if (asked === undefined) return outcome;
  const document = documentAsAsked(doc, field, asked, shardKey);
  if (outcome instanceof AssertivePending) return new AssertivePending(outcome.lock, outcome.target, outcome.blockedBy, document);
  return { ...outcome, document };
}
