import type { Document } from 'mongodb';
import { NEVER } from './lock-data';
import type { LockOperation } from './operation';
import { allOf, type LockPaths, type StoredLock } from './stored-format';

/**
 * A quarantine mark (`lock.quarantine`): an exclusive holder ended its hold with it, and until it
 * ends (at `until` by the server's clock, or when it is cleared) every acquisition of the document
 * is refused (`Quarantined`). A document without one behaves as before the mark existed.
 */
export interface StoredQuarantine {
  /** Why the holder quarantined the document. */
  reason: string;
  /** When it was set, by the server's clock (`$currentDate`). */
  since: Date;
  /** When it ends, by the server's clock; absent: only `clearQuarantine` ends it. */
  until?: Date;
  /** The id of the lock whose holder set it. */
  by: string;
}

/** The path of the mark in the lock property. */
export function quarantinePath(paths: LockPaths): string {
  return `${paths.field}.quarantine`;
}

/**
 * Filter: the document carries no live quarantine mark: none (no string `reason`), or one whose
 * `until` is a date the server's clock (`$$NOW`) has reached. Query operators for the absent case
 * (a document never quarantined is judged without `$expr`), `$expr` only to compare `until` with
 * `$$NOW`: evaluated in the same atomic update as every other condition of an acquisition.
 */
export function notQuarantined(paths: LockPaths): Document {
  const path = quarantinePath(paths);
  return { $or: [{ [`${path}.reason`]: { $not: { $type: 'string' } } }, { [`${path}.until`]: { $type: 'date' }, $expr: { $lte: [`$${path}.until`, '$$NOW'] } }] };
}

/** What a quarantine writes besides ending the hold: its reason, its end if any, the holder's lock id, and the server's clock as `since`. */
export interface QuarantineMark {
  readonly reason: string;
  readonly until?: Date;
  readonly by: string;
}

/**
 * Update: sets the mark (field by field, so that `since` is the server's clock by `$currentDate`
 * in the same update; an `until` left by an ended earlier mark is removed), and raises the
 * document's `until` to the mark's end (a mark without one: never). Merged into the
 * release of the holder's lock (a commit: lib/protocol/release.ts), which matches only while that
 * lock is live by `$$NOW`: the mark and the end of the hold land together or not at all.
 */
export function quarantineUpdate(paths: LockPaths, mark: QuarantineMark): Document {
  const path = quarantinePath(paths);
  return {
    $set: { [`${path}.reason`]: mark.reason, [`${path}.by`]: mark.by, ...(mark.until && { [`${path}.until`]: mark.until }) },
    $currentDate: { [`${path}.since`]: true },
    // The document's `until` covers the mark too, so that `monglock status` finds it by the index it reads locks by.
    $max: { [paths.until]: mark.until ?? new Date(NEVER) },
    ...(!mark.until && { $unset: { [`${path}.until`]: '' } }),
  };
}

/**
 * Clear: removes the mark of the document `target` names, if it has one (live or ended). It
 * admits nobody by itself: the next acquisition is judged as any other.
 */
export function clearQuarantineOperation(paths: LockPaths, target: Document): LockOperation {
  const path = quarantinePath(paths);
  return { filter: allOf(target, [{ [path]: { $exists: true } }]), update: { $unset: { [path]: '' } } };
}

/** The mark of `lock` if it is live at server time `now` (ms): what refuses an acquisition. */
export function liveQuarantine(lock: StoredLock, now: number): StoredQuarantine | undefined {
  const mark = lock.quarantine;
  if (typeof mark !== 'object' || mark === null || typeof mark.reason !== 'string') return undefined;
  return mark.until instanceof Date && mark.until.getTime() <= now ? undefined : mark;
}

/** Filter: the document carries a quarantine mark (a string `reason`), live or ended: what `monglock status` reads and judges by `$$NOW`. */
export function hasQuarantineMark(paths: LockPaths): Document {
  return { [`${quarantinePath(paths)}.reason`]: { $type: 'string' } };
}
