import { leaderOf, type LeaderState } from '../protocol/leader';
import { sameValue } from './stored-value';
import type { StoredLock } from '../protocol/stored-format';

/** One read of the election's document: its lock (undefined: no document) and the server's clock. */
export interface ElectionReading {
  readonly stored: StoredLock | undefined;
  readonly serverNow: Date;
}

/** What an observer needs from its election. */
export interface ObserveSite {
  read(): Promise<ElectionReading>;
  /** Calls `changed` after each change the change stream reports for the document; returns the function that stops it. */
  watch(changed: () => void): () => void;
  /** ms between safety reads (a change the stream did not report, or no stream). */
  pollMs(): number;
}

/**
 * ms between an observer's safety reads: a tenth of the lease while a stream tells of changes
 * (it may miss one: a backend whose events name no document still wakes it), a fortieth without
 * (polling alone), within 100 ms to 5 s.
 */
export function safetyPollMs(lease: number, streaming: boolean): number {
  return Math.min(5_000, Math.max(100, streaming ? lease / 10 : lease / 40));
}

/** How long past a lease's end the observer reads again, so that the server's clock has passed it. */
const PAST_EXPIRY_MS = 5;

/**
 * The states of one election: the current one first, then each change of leader or value
 * (`undefined` while nobody leads), read again after each change the stream reports, at the
 * leader's lease end (which no write marks) and at every safety poll. A slow consumer gets the
 * latest state when it asks, not every step. Ends when `signal` aborts or the consumer stops,
 * leaving no listener or timer; rejects with the error of a read that failed.
 */
export async function* observeLeaders(site: ObserveSite, signal: AbortSignal | undefined): AsyncGenerator<LeaderState | undefined, void, undefined> {
  let changed = true;
  let wake: (() => void) | undefined;
  const poke = (): void => {
    changed = true;
    wake?.();
  };
  let unwatch: (() => void) | undefined = site.watch(poke);
  const letGo = (): void => {
    unwatch?.();
    unwatch = undefined;
  };
  // An abort lets go of the stream at once, also while the consumer is not pulling (suspended at a
  // yield, the generator would otherwise keep it until its next pull).
  const aborted = (): void => {
    letGo();
    poke();
  };
  signal?.addEventListener('abort', aborted, { once: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    let last: { readonly id: string; readonly value: unknown } | null | undefined;
    for (;;) {
      if (signal?.aborted) return;
      changed = false;
      const reading = await site.read();
      if (signal?.aborted) return;
      const now = reading.serverNow.getTime();
      const leader = reading.stored && leaderOf(reading.stored, now);
      const moved = last === undefined || (leader ? last === null || last.id !== leader.id || !sameValue(last.value, leader.state.value) : last !== null);
      if (moved) {
        last = leader ? { id: leader.id, value: leader.state.value } : null;
        yield leader?.state;
        if (signal?.aborted) return;
      }
      if (changed) continue;
      const untilExpiry = leader ? leader.state.expiresAt.getTime() - now + PAST_EXPIRY_MS : Infinity;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, Math.max(0, Math.min(untilExpiry, site.pollMs())));
      });
      clearTimeout(timer);
      wake = undefined;
    }
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', aborted);
    letGo();
  }
}
