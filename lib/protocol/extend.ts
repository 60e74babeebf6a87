import type { Document } from 'mongodb';
import type { TagRule } from './lock-data';
import { arrayFilterOf, mergeUpdates, type LockOperation } from './operation';
import { proofMatch, type Proof } from './proofs';
import { commitConditions, onlyOne } from './release';
import { allOf, entryLiveOnServer, pruneCommits, pruneTags, recordJudged, stampWithin, type LockPaths } from './stored-format';

/** An extension to send. */
export interface ExtendRequest {
  readonly paths: LockPaths;
  readonly rule: TagRule;
  /** Every tag of the lock: the expired entries of the others are pruned. */
  readonly tags: Iterable<string>;
  /** The locked document (`{ _id }`). */
  readonly target: Document;
  readonly proof: Proof;
  /** A stamp from the lower bound of the server's clock, checked within `tolerance` below `$$NOW`. */
  readonly at: Date;
  readonly tolerance: number;
  /** The new expiry (the stamp plus the lease). */
  readonly exp: Date;
  /** The caller's update, applied with the extension (checked as a commit is). */
  readonly update?: Document;
  /** With `update`: what the document must also match (the array match of a positional `$` update). */
  readonly match?: Document;
  /** With `update`: the array filters of its `$[<identifier>]` paths. */
  readonly arrayFilters?: readonly Document[];
  /** What the lock kind also writes (resource locks: the renewal time, the GC date). */
  readonly extension?: Document;
  /**
   * Writes the expiry with `$max`, never lowering it: for a statement that may land late (a batch's,
   * checked with the wide tolerance, whose reply may be lost) after a later extension of the same
   * lock wrote a later expiry, which the holder counts on.
   */
  readonly raiseOnly?: boolean;
}

/**
 * Extend: sets the lock's expiry to the stamp plus the lease, in one update that checks that the
 * lock is still in the document and unexpired by `$$NOW`, that the stamp is within the tolerance
 * below `$$NOW` (and, for a v2 timestamp proof, that it names one lock; with an update, what a
 * commit checks). Writes the server's clock and the latest expiry, and prunes as an acquisition does.
 * With `raiseOnly` the expiry is only ever raised (a late statement lowers nothing).
 *
 * Why it never admits a second holder: a lock that has expired, or was removed, is never
 * re-created, so no lock is live again once another could have been acquired.
 */
export function extendOperation(request: ExtendRequest): LockOperation {
  const { paths, rule, proof, at, exp } = request;
  const live = { $and: [entryLiveOnServer(paths, rule.tag, proof), stampWithin(at, request.tolerance)] };
  const others = [...request.tags].filter((other) => other !== rule.tag);
  const expiry = `${paths.tag(rule.tag)}.$[mine].exp`;
  return {
    filter: allOf(request.target, [{ $expr: live }, ...onlyOne(paths, rule.tag, proof), ...(request.update ? [...commitConditions(paths, rule, proof), ...(request.match ? [request.match] : [])] : [])]),
    update: mergeUpdates(
      request.update,
      {
        ...(!request.raiseOnly && { $set: { [expiry]: exp } }),
        $currentDate: { [paths.now]: true },
        $max: { [paths.until]: exp, ...recordJudged(paths, at), ...(request.raiseOnly && { [expiry]: exp }) },
        $pull: { ...pruneTags(paths, others, at, true), ...pruneCommits(paths, at) },
      },
      request.extension,
    ),
    arrayFilters: [arrayFilterOf('mine', proofMatch(proof)), ...(request.update ? (request.arrayFilters ?? []) : [])],
  };
}
