import type { Document } from 'mongodb';
import type { LockOperation } from './operation';
import { notQuarantined } from './quarantine';
import { allOf, entryLiveOnServer, pruneTags, recordJudged, stampWithin, type LockPaths } from './stored-format';

/** A continuation of an assertive registration to send. */
export interface ContinueRequest {
  readonly paths: LockPaths;
  /** Every tag of the lock: their expired entries are pruned. */
  readonly tags: Iterable<string>;
  /** The locked document (`{ _id }`). */
  readonly target: Document;
  readonly tag: string;
  /** The registered lock's id. */
  readonly id: string;
  /** A stamp from the lower bound of the server's clock, checked within `tolerance` below `$$NOW`. */
  readonly at: Date;
  readonly tolerance: number;
}

/**
 * Continue (assertive): checks that the registered lock is still in the document and unexpired
 * by the server's clock (`$$NOW`), and that the stamp is within the tolerance below it; writes
 * the server's clock and prunes expired entries (at the checked stamp). It also needs the document
 * without a live quarantine mark: a continuation completes an acquisition, refused as every other. Whether the tags the lock
 * asserts over are gone is read from the reply.
 *
 * Why it never admits a second holder: it adds no entry and extends none; it only removes entries
 * that expired before a time the server has passed.
 */
export function continueOperation(request: ContinueRequest): LockOperation {
  const { paths, at } = request;
  return {
    filter: allOf(request.target, [notQuarantined(paths), { $expr: { $and: [entryLiveOnServer(paths, request.tag, { id: request.id }), stampWithin(at, request.tolerance)] } }]),
    update: { $pull: pruneTags(paths, request.tags, at, true), $currentDate: { [paths.now]: true }, $max: recordJudged(paths, at) },
  };
}
