/**
 * The interleavings' quarantine: a writeLock section on `w1` (contended by the plain writeLock
 * operations and the groups) that ends by quarantining the document until {@link QUARANTINE_MS}
 * later. Once its call resolved, the mark has landed: the history checker's `quarantine` rule then
 * finds no hold of `w1` that starts before the mark can have ended.
 */
import { quarantine, type LockHandle, type WriteLock } from '../lib';
import type { QuarantineEvent } from './history-checker';

/** How long a mark lasts, in ms (`until`, judged by the server's clock). */
export const QUARANTINE_MS = 1_500;
/** The quarantined document: one the writeLock operations and groups contend for. */
export const QUARANTINE_TARGET = 'w1';

/** Runs `body` under the writeLock of {@link QUARANTINE_TARGET}, then quarantines it in the release; records the mark once it landed. */
export async function runQuarantine(
  write: WriteLock,
  params: { readonly wait: number; readonly signal: AbortSignal },
  body: (handle: LockHandle, signal: AbortSignal) => Promise<void>,
  now: () => number,
  recorded: (event: QuarantineEvent) => void,
): Promise<void> {
  let until = 0;
  await write.using({ _id: QUARANTINE_TARGET }, { ...params, locktimeout: 600 }, async (handle, signal) => {
    await body(handle, signal);
    until = now() + QUARANTINE_MS;
    return quarantine('quarantined by the scenario', { until: new Date(until) });
  });
  recorded({ type: 'quarantine', target: QUARANTINE_TARGET, landedBy: now(), until });
}
