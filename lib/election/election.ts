import type { Document } from 'mongodb';
import { withDbErrors } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { readParams, resolveLockOptions, type CallOptions, type LockOptions, type PromiseLibrary } from '../common/options';
import type { PromiseOf } from '../common/promise-types';
import { expectMs } from '../common/validation';
import { DocumentLock } from '../locks/document-lock';
import { resolveTagRules } from '../locks/relationships';
import { ResourceStore } from '../resources/resource-store';
import { changeFeedOf } from '../waiting/change-feed';
import { readWaitParams } from '../waiting/wait-options';
import { birthOperation } from '../protocol/resource-document';
import { expectElectionFilter } from './election-filter';
import { leaderOf, LEADER_TAG, type LeaderState } from '../protocol/leader';
import { observeLeaders, safetyPollMs, type ElectionReading } from './observe';
import { watchDocument } from './document-watch';
import { campaignFor } from './campaign';
import { ElectionTerm, type Term } from './term';

/** Options of {@link election}. */
export interface ElectionOptions<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined>
  extends Pick<LockOptions<TSchema, P>, 'collection' | 'timeout' | 'w' | 'boom' | 'field' | 'Promise' | 'clock' | 'changeStreams' | 'maxClockSkew' | 'shardKey'> {
  /**
   * The leader's lease in ms, renewed in the background while its term lasts: a leader that dies
   * is replaced within it (plus one wake-up of the next campaigner).
   * @default 10000
   */
  readonly lease?: number;
}

/** Per-call options of `campaign`. */
export interface CampaignParams<V = unknown> extends Pick<CallOptions, 'timeout' | 'w' | 'boom'> {
  /** What this caller proclaims while it leads (any value MongoDB can store). @default null */
  readonly value?: V;
  /** Ends the campaign while it waits (not a term already won: `resign` ends that). */
  readonly signal?: AbortSignal;
  /** ms to wait for the lead; then it rejects with `LockAlreadyTaken` (409). @default Infinity */
  readonly wait?: number;
}

/** Per-call options of `observe`. */
export interface ObserveParams {
  /** Ends the observation (the loop ends, leaving no cursor or timer). */
  readonly signal?: AbortSignal;
}

/** Leader election on one document per election: `campaign` to lead, `leader` to look, `observe` to follow. `P` is the `Promise` option. */
export interface Election<P = undefined> {
  /**
   * Waits until this caller leads the election `filter` names (`{ _id }`, plus the shard key on a
   * sharded collection; the document is created when missing), then keeps its lease in the
   * background while the term lasts. Rejects with `LockAlreadyTaken` (409) when `wait` runs out,
   * or the signal's reason.
   */
  campaign<V = unknown>(filter: Document, params?: CampaignParams<V>): PromiseOf<P, Term<V, P>>;
  /** Who leads, by the server's clock (one read, nothing written); undefined when nobody does or the document is missing. */
  leader<V = unknown>(filter: Document, params?: Pick<CallOptions, 'timeout' | 'boom'>): PromiseOf<P, LeaderState<V> | undefined>;
  /** The current state, then each change of leader or value (`undefined` while nobody leads), until the signal aborts or the loop breaks. */
  observe<V = unknown>(filter: Document, params?: ObserveParams): AsyncIterable<LeaderState<V> | undefined>;
}

const OPTIONS = knownKeys<ElectionOptions>()(['collection', 'lease', 'timeout', 'w', 'boom', 'field', 'Promise', 'clock', 'changeStreams', 'maxClockSkew', 'shardKey'], {
  locktimeout: 'an election\'s lease is `lease` (ms)',
  releaseW: 'a resignation is written at `w`, as a leader must know it landed',
  fair: 'campaigners are not queued: the first to try once the lead is free wins',
});
const CAMPAIGN = knownKeys<CampaignParams>()(['value', 'signal', 'wait', 'timeout', 'w', 'boom'], { locktimeout: 'the lease is the election\'s `lease` option' });
const LEADER = knownKeys<Pick<CallOptions, 'timeout' | 'boom'>>()(['timeout', 'boom']);
const OBSERVE = knownKeys<ObserveParams>()(['signal']);

/**
 * Creates an election: one leader per document, with a lease renewed while it leads, a fencing
 * token that grows with every term, and change-stream wake-ups.
 * @throws {TypeError | RangeError} on invalid options.
 * @example
 * const elections = election({ collection: db.collection('elections'), lease: 5000 });
 * const term = await elections.campaign({ _id: 'billing' }, { value: hostname() });
 * term.signal.addEventListener('abort', stopWork);
 */
export function election<TSchema extends Document = Document, P extends PromiseLibrary | undefined = undefined>(options: ElectionOptions<TSchema, P>): Election<P> {
  const o = readParams('options', options, OPTIONS, false);
  const lease = o.lease === undefined ? 10_000 : expectMs('options.lease', o.lease);
  const resolved = resolveLockOptions(options, OPTIONS);
  const shardKey = Object.keys(resolved.deployment.shardKey ?? {});
  const core = new DocumentLock(options, {
    options: OPTIONS,
    rules: resolveTagRules({ [LEADER_TAG]: lease }, undefined, { [LEADER_TAG]: { cooperative: [LEADER_TAG] } }),
    name: 'election',
    conflict: 'LockAlreadyTaken',
    reportsReacquired: false,
  });
  const feed = resolved.changeStreams ? changeFeedOf(resolved.collection, resolved.field) : undefined;
  const births = new ResourceStore(resolved.collection, resolved.field, resolved.clock);
  const read = async (target: Document, params: unknown): Promise<ElectionReading> => {
    const seen = await core.engine.read(target, core.callOptions(params).call);
    return { stored: seen.value ? core.engine.paths.read(seen.value) : undefined, serverNow: seen.serverNow ?? new Date(core.clock.lower()) };
  };
  const site = {
    core,
    lease,
    feed,
    read,
    ensure: (target: Document, params: Record<string, unknown>) => {
      const { call } = core.callOptions(params);
      return withDbErrors(call.boom, () => births.ensureResource(birthOperation(core.engine.paths, target), call));
    },
  };
  const methods = {
    campaign: (filter: unknown, params: unknown) =>
      core.run(
        (cancellation) => campaignFor(site, expectElectionFilter(filter, shardKey), readParams('params', params, CAMPAIGN), cancellation),
        // A term won after its caller cancelled the campaign (bluebird): nobody holds it, so it resigns.
        (outcome) => {
          if ('value' in outcome && outcome.value instanceof ElectionTerm) void outcome.value.resign().catch(() => undefined);
        },
      ),
    leader: (filter: unknown, params: unknown) =>
      core.run(async () => {
        const target = expectElectionFilter(filter, shardKey);
        // A missing document reads as nobody leading (engine.read resolves it as null, never RessourceNotFound).
        const reading = await read(target, readParams('params', params, LEADER));
        return reading.stored && leaderOf(reading.stored, reading.serverNow.getTime())?.state;
      }),
    observe: (filter: unknown, params: unknown) => {
      const target = expectElectionFilter(filter, shardKey);
      const { signal } = readWaitParams(readParams('params', params, OBSERVE));
      const watched = (changed: () => void) => watchDocument(feed, target._id, changed);
      return observeLeaders({ read: () => read(target, {}), watch: watched, pollMs: () => safetyPollMs(lease, feed?.state === 'streaming') }, signal);
    },
  };
  return methods as unknown as Election<P>;
}
