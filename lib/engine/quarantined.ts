import { lockError, type BoomLike } from '../common/errors';
import { liveQuarantine, type StoredQuarantine } from '../protocol/quarantine';
import type { StoredLock } from '../protocol/stored-format';
import { refusedBy } from './acquired';
import type { Verdict } from './stamp-refusals';

/** What a `Quarantined` error carries as `data`: the mark's reason, when it was set and when it ends (undefined: when it is cleared), by the server's clock. */
export interface QuarantineData {
  readonly reason: string;
  readonly since: Date;
  readonly until: Date | undefined;
}

/** The `Quarantined` error (409) for `mark`: final, never waited on. */
export function quarantinedError(mark: StoredQuarantine, boom: BoomLike | undefined): Error {
  const data: QuarantineData = { reason: mark.reason, since: mark.since, until: mark.until instanceof Date ? mark.until : undefined };
  const until = data.until ? `until ${data.until.toISOString()}` : 'until it is cleared';
  return lockError('Quarantined', boom, { data, detail: `the document is quarantined ${until}: ${mark.reason}` });
}

/**
 * The verdict on a refused acquisition of a document whose lock, read at server time `now` (ms),
 * carries a live quarantine mark: `Quarantined`, before any other refusal (undefined: none).
 */
export function quarantinedVerdict(lock: StoredLock, now: number, boom: BoomLike | undefined, documentId: unknown): Verdict | undefined {
  const mark = liveQuarantine(lock, now);
  return mark ? { retry: false, error: refusedBy(quarantinedError(mark, boom), documentId) } : undefined;
}
