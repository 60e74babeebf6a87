import type { Document } from 'mongodb';
import { isLockError, type BoomLike } from '../common/errors';
import type { Cancellation } from '../common/promise-library';
import { ENTRY_FIELDS } from '../locks/document-acquire';
import type { DocumentLock } from '../locks/document-lock';
import type { LockHandle } from '../locks/lock-handle';
import type { ChangeFeed } from '../waiting/change-feed';
import { readWaitParams } from '../waiting/wait-options';
import { watchDocument } from './document-watch';
import { expectStorable } from './stored-value';
import { leaderOf, LEADER_TAG } from '../protocol/leader';
import type { ElectionReading } from './observe';
import { ElectionTerm } from './term';

/** How many times one campaign creates its document again when it was deleted under it, when it is named with a shard key (by `_id` alone: as long as it waits). */
const CREATE_ROUNDS = 3;

/** What a campaign needs from its election. */
export interface CampaignSite {
  readonly core: DocumentLock;
  /** The leader's lease, ms. */
  readonly lease: number;
  readonly feed: ChangeFeed | undefined;
  read(target: Document, params: Record<string, unknown>): Promise<ElectionReading>;
  /** Creates the election's document unless it exists (and gives it a birth time if it has none: its tokens then start there). */
  ensure(target: Document, params: Record<string, unknown>): Promise<unknown>;
}

/**
 * A campaign: creates the election's document when missing, then waits (`wait`, default forever)
 * for its lock as any acquisition does, and keeps it with `using()` (no `maxHold`) while the term
 * lasts: the term ends when it resigns, or when the hold's signal aborts (a renewal failed, the
 * lease may have ended). The campaign's signal ends the wait only, never a term it won.
 */
export async function campaignFor(site: CampaignSite, target: Document, params: Record<string, unknown>, cancellation: Cancellation | undefined): Promise<ElectionTerm> {
  const value = params.value === undefined ? null : expectStorable('params.value', params.value);
  const { wait, signal } = readWaitParams({ wait: params.wait ?? Infinity, signal: params.signal });
  const call = { ...(params.timeout !== undefined && { timeout: params.timeout }), ...(params.w !== undefined && { w: params.w }), ...(params.boom !== undefined && { boom: params.boom }) };
  const resolved = site.core.callOptions(call).call;
  // The wait's own signal: the caller's and the promise's cancellation end it until the term begins, never after.
  const waiting = new AbortController();
  const stop = (): void => waiting.abort((signal?.aborted ? signal : cancellation?.signal)?.reason);
  const outer = [signal, cancellation?.signal].filter((s): s is AbortSignal => s !== undefined);
  for (const s of outer) {
    if (s.aborted) stop();
    else s.addEventListener('abort', stop, { once: true });
  }
  const detach = (): void => outer.forEach((s) => s.removeEventListener('abort', stop));
  const ends = performance.now() + wait;
  try {
    for (let round = 1; ; round++) {
      if (waiting.signal.aborted) throw waiting.signal.reason;
      await site.ensure(target, call);
      try {
        return await lead(site, target, value, { ...call, wait: Math.max(0, Math.round(ends - performance.now())), signal: waiting.signal }, resolved.boom, detach);
      } catch (error) {
        // Deleted between its creation and the lock, or while waiting: created again, for as long as
        // the campaign waits. Named by `_id` alone, each round's upsert creates the document or gives
        // it its birth time, so only a deletion makes it missing again; with a shard key, a document of
        // that `_id` under other shard-key values is never found, and the rounds are capped.
        if (!isLockError(error, 'RessourceNotFound')) throw error;
        const byIdAlone = Object.keys(target).length === 1;
        if (byIdAlone ? performance.now() >= ends : round === CREATE_ROUNDS) throw error;
      }
    }
  } finally {
    detach();
  }
}

/** Takes the election's lock and starts its term; resolves the term as its hold begins. */
function lead(site: CampaignSite, target: Document, value: unknown, params: Record<string, unknown>, boom: BoomLike | undefined, begun: () => void): Promise<ElectionTerm> {
  const { core } = site;
  const call = core.callOptions(params).call;
  const waitSignal = params.signal as AbortSignal;
  return new Promise((resolve, reject) => {
    let term: ElectionTerm | undefined;
    // The campaign's signal aborted after the lock was won but before the term began: no term (its
    // signal ends the wait, never a term); the hold ends at once, which releases, then it rejects.
    let gaveUp: { readonly reason: unknown } | undefined;
    const body = (handle: LockHandle, holdSignal: AbortSignal): Promise<void> => {
      if (waitSignal.aborted) {
        gaveUp = { reason: waitSignal.reason };
        return Promise.resolve();
      }
      begun();
      term = new ElectionTerm(handle, holdSignal, value, {
        store: core.engine.store,
        paths: core.engine.paths,
        call,
        boom,
        run: (method) => core.run(method),
        lookGapMs: Math.max(25, Math.round(site.lease / 20)),
        watch: (changed) => watchDocument(site.feed, target._id, changed),
        leaderId: async () => {
          const reading = await site.read(target, {});
          return reading.stored && leaderOf(reading.stored, reading.serverNow.getTime())?.id;
        },
      });
      resolve(term);
      return term.ended;
    };
    // Only a document with a birth time: one the user deleted and inserted again, or replaced whole,
    // while this campaign waited has none, and its tokens would start again from 1 (below every
    // earlier term's). Such a document is not found, and the campaign gives it a birth time first.
    const born = { ...target, [core.engine.paths.born]: { $exists: true } };
    const held = core.using(born, LEADER_TAG, { ...params, locktimeout: site.lease, maxHold: Infinity, [ENTRY_FIELDS]: { value } }, body);
    held.then(
      () => (gaveUp ? reject(gaveUp.reason) : term?.finished(held)),
      (error: unknown) => (term ? term.finished(held) : reject(gaveUp ? gaveUp.reason : error)),
    );
  });
}
