import type { DocumentLock } from './document-lock';
import { knownKeys, type KnownKeys } from '../common/known-keys';
import { CALL_KEYS, readParams, type CallOptions } from '../common/options';

/** Per-call options of `forceRelease`: call options only (a forced release proves nothing, applies no update and joins no transaction). */
export type ForceReleaseParams = CallOptions;

/** Why `forceRelease` refuses a key that a proven release takes. */
export const NOT_FORCED: Readonly<Record<string, string>> = {
  lock: 'a forced release takes every lock of the document, whoever holds it: to release your own, `release(filter, { lock })`',
  timestamp: 'a forced release takes every lock of the document, whoever holds it: to release your own, `release(filter, { timestamp })`',
  update: 'a forced release applies no update: commit with `release(filter, { lock, update })`',
  session: 'a forced release joins no transaction',
};

/** The keys `forceRelease` takes: call options, and what a lock kind adds (a multiLock's `tag`). */
export const FORCE_RELEASE = knownKeys<ForceReleaseParams>()(CALL_KEYS, NOT_FORCED);

/**
 * `forceRelease(filter, params)`: takes every lock of the tag `tagOf(params)` names from the first
 * document matching `filter`, whoever holds it (monglock v2's forced release, said explicitly).
 * Rejects with `RessourceNotFound` when no document matches. Their holders find out at their next
 * release or extension (`LockNotFound`/`LockWasReacquired`), or when their lease keeper does.
 */
export function forceReleaseMethod(core: DocumentLock, known: KnownKeys, tagOf: (params: Record<string, unknown>) => string) {
  return (filter: unknown, params: unknown): Promise<void> =>
    core.run(async () => {
      const p = readParams('params', params, known);
      await core.releaseWith(filter, tagOf(p), undefined, undefined, p);
    });
}

/** The TypeError of a proof-less `release(filter)` on a lock made with `forcedRelease: false`. */
export function forcedReleaseRefused(kind: string): TypeError {
  return new TypeError(
    `Expected \`params.lock\` (or \`params.timestamp\`) to prove which lock to release: this ${kind} was made with \`forcedRelease: false\`, so a release without a proof does not take the lock from its holder; to do that, call \`forceRelease(filter)\``,
  );
}
