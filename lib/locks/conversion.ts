import type { Document } from 'mongodb';
import { traced } from '../common/diagnostics';
import { didYouMean, knownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, readParams, type CallOptions } from '../common/options';
import { expectSafeName } from '../common/validation';
import type { Acquired } from '../engine/acquired';
import type { LockData } from '../protocol/lock-data';
import { readWaitParams, type WaitOptions } from '../waiting/wait-options';
import { ConversionRun, type ConversionAftermath, type ConvertSite } from './conversion-run';

export type { ConversionAftermath, ConversionChange, ConvertSite } from './conversion-run';

/**
 * Per-call options of `handle.convert(tag, params)`. `signal` cancels a conversion: it rejects
 * promptly with `signal.reason` (an aborted signal sends nothing), and a conversion that an attempt
 * on its way lands afterwards is converted back (if that is refused, the handle takes the tag the
 * lock is under).
 */
export interface ConvertParams extends CallOptions, Pick<WaitOptions, 'wait' | 'signal'> {
  /** Lease of the converted lock in ms, from the server's now. @default the new tag's lease */
  readonly locktimeout?: number;
}

export const CONVERT_PARAMS = knownKeys<ConvertParams>()([...CALL_KEYS, 'wait', 'signal', 'locktimeout'], {
  ...FIXED_PER_LOCK,
  tag: 'the new tag is the first argument: `handle.convert(tag, params)`',
  fair: 'a conversion waits with writer preference (a pending upgrade), not in the fair queue',
});

/** {@link convertHeld}, traced on `monglock:extend` with `conversion: { from, to }` (outcome `converted`). */
export function convertTraced(site: ConvertSite, kind: string, target: Document, lock: LockData, tag: unknown, params: unknown, aftermath?: (after: ConversionAftermath) => void): Promise<Acquired> {
  const conversion = { from: lock.tag, to: String(tag) };
  return traced(
    'extend',
    () => ({ operation: 'extend', kind, namespace: site.namespace, tag: lock.tag, lockId: lock.id, fence: lock.fence, conversion }),
    () => site.clock.local(),
    async (context) => {
      const converted = await convertHeld(site, target, lock, tag, params, aftermath);
      if (context) Object.assign(context, { tag: converted.lock.tag, fence: converted.lock.fence, expiresAt: converted.lock.expiresAt, outcome: 'converted' });
      return converted;
    },
  );
}

/**
 * Converts the held `lock` to `tag` in one update (lib/engine/conversion.ts): upgrade or downgrade.
 * With `params.wait`, a conversion refused by other holders marks a pending upgrade (renewed while
 * it waits, so that new locks of the tags it waits for are refused) and tries again until `wait`
 * passes or `params.signal` aborts; its mark is dropped if it gives up (see {@link ConversionRun}).
 * A signal already aborted sends nothing. A conversion that would wait for another holder's
 * pending upgrade, which waits for it, is refused at once (`UpgradeConflict`). Resolves the
 * converted lock (same id, new tag, token and lease); when it rejects, `aftermath` hears what
 * became of the lock.
 */
export async function convertHeld(
  site: ConvertSite,
  target: Document,
  lock: LockData,
  tag: unknown,
  params: unknown,
  aftermath: (after: ConversionAftermath) => void = () => undefined,
): Promise<Acquired> {
  const { engine } = site;
  const to = expectSafeName('tag', tag);
  if (!engine.tags.has(to)) throw new TypeError(`Unknown tag \`${to}\`.${didYouMean(to, [...engine.tags])} A lock converts to another tag of its multiLock (${[...engine.tags].join(', ')})`);
  if (to === lock.tag) throw new TypeError(`Expected \`tag\` to be another tag than the lock's own (\`${lock.tag}\`)`);
  if (lock.owner !== undefined) throw new TypeError("A reentrant hold cannot be converted: its owner's other holds keep their tag (convert a lock taken without `owner`)");
  const { params: p, call } = site.callOptions(readParams('params', params, CONVERT_PARAMS));
  const lease = site.leaseOf(to, p);
  const waiting = readWaitParams(p);
  if (waiting.signal?.aborted) throw waiting.signal.reason;
  const run = new ConversionRun(site, target, lock, to, lease, call, waiting);
  try {
    const converted = await run.run();
    // A downgrade may admit this process's waiters of the old tag.
    site.waiters.released(target._id, lock.tag, lock.id);
    site.waiters.acquired(target._id, lock.id, to, converted.lock.expiresAt);
    return converted;
  } catch (error) {
    aftermath(run.giveUp(error));
    throw error;
  }
}
