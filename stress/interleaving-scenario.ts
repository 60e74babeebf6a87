/**
 * Random lock histories, generated (and shrunk) by fast-check: several clients, each with its own
 * clock skew and its own delays on requests and replies, running scoped locks of every kind with
 * random hold times, waits and aborts (semaphore permits, reentrant nested holds, read locks
 * upgraded to write, election terms, and groups of several documents in random order included), purges of resource documents, and hapi requests with
 * slow pre methods, server timeouts and client disconnects. Some histories run on a simulated
 * sharded cluster (routers whose clocks are ahead of or behind the shard's), and a client may have
 * a share of its acquisitions land late (failed at once, applied later).
 */
import fc from 'fast-check';

/** One client: its clock and its network. */
export interface ClientPlan {
  /** Added to the local clock it gives monglock, in ms: inside and beyond the stamp tolerance. */
  readonly skewMs: number;
  /** Largest delay before a request is sent, in ms. */
  readonly requestDelayMs: number;
  /** Largest delay before a reply is handed over, in ms. */
  readonly replyDelayMs: number;
  /** Share of calls that are delayed (0..1). */
  readonly delayShare: number;
  /**
   * Share of its acquisitions that land late (0..1): the caller is answered with a network error
   * at once, and the command is applied {@link lateByMs} later, with `$$NOW` fixed when it was sent
   * (a command blocked on the server).
   */
  readonly lateShare: number;
  /** How much later such an acquisition is applied, in ms: within the call's timeout. */
  readonly lateByMs: number;
}

/**
 * A sharded cluster: every client reaches its collections through simulated routers (mongos)
 * whose clocks differ from the shard's, one picked per command, with the shard key `{ _id: 1 }`.
 */
export interface ClusterPlan {
  /** Each router's clock minus the shard's, in ms (within ±1,000). */
  readonly routers: readonly number[];
  /**
   * The `maxClockSkew` every lock is given: `tight`, the largest |offset| rounded up to 100 ms;
   * `default`, none (monglock assumes 1,000 ms on a sharded cluster, which covers every offset).
   */
  readonly skew: 'tight' | 'default';
}

/** The `maxClockSkew` option the locks of `cluster` get (undefined: the default). */
export function clusterSkew(cluster: ClusterPlan): number | undefined {
  return cluster.skew === 'default' ? undefined : Math.ceil(Math.max(0, ...cluster.routers.map(Math.abs)) / 100) * 100;
}

/** What every scoped operation has. */
interface Timed {
  /** The client (index into the scenario's clients). */
  readonly client: number;
  /** ms after the history starts. */
  readonly startAt: number;
  /** ms after its start at which its AbortSignal aborts (undefined: never). */
  readonly abortAfter: number | undefined;
  /** How long the body keeps running once it holds the lock, in ms. */
  readonly holdMs: number;
  /** `wait` of the acquisition, in ms. */
  readonly wait: number;
}

/** One document of a group (`usingAll`): a writeLock document, the multiLock's under a tag, or a semaphore permit. */
export type GroupMember = 'w0' | 'w1' | 'g0' | 'm0:read' | 'm0:write' | 's0';

/** One operation of a history. */
export type Operation =
  | (Timed & { readonly kind: 'writeLock'; readonly doc: 'w0' | 'w1'; readonly lease: number; readonly mode: 'plain' | 'fair' | 'folded' })
  | (Timed & { readonly kind: 'burst'; readonly size: number; readonly fair: boolean })
  | (Timed & { readonly kind: 'multiLock'; readonly tag: 'read' | 'write' })
  | (Timed & { readonly kind: 'semaphore'; readonly permits: 1 | 2 })
  | (Timed & { readonly kind: 'reentrant'; readonly owner: 'a' | 'b' })
  | (Timed & { readonly kind: 'runOnce'; readonly minHold: 100 | 300 })
  | (Timed & { readonly kind: 'rate' })
  | (Timed & { readonly kind: 'upgrade' })
  | (Timed & { readonly kind: 'election' })
  | (Timed & { readonly kind: 'quarantine' })
  | (Timed & { readonly kind: 'group'; readonly members: ReadonlyArray<GroupMember> })
  | (Timed & { readonly kind: 'resource'; readonly type: 'exclusive' | 'shared'; readonly ttl: number | undefined })
  | { readonly kind: 'purge'; readonly client: number; readonly startAt: number }
  | {
      readonly kind: 'hapi';
      readonly startAt: number;
      readonly preMs: number;
      readonly handlerMs: number;
      /** The route's server timeout (hapi answers 503 while the route goes on), in ms. */
      readonly serverTimeout: number | undefined;
      /** ms after which the HTTP client disconnects (undefined: it waits for the answer). */
      readonly disconnectAfter: number | undefined;
    };

/** A whole history to run. */
export interface Scenario {
  /** Seeds the per-call delays. */
  readonly seed: number;
  /** Undefined: one server, one clock (as before); else a simulated sharded cluster. */
  readonly cluster: ClusterPlan | undefined;
  readonly clients: readonly ClientPlan[];
  readonly operations: readonly Operation[];
}

/** How large histories are. */
export interface ScenarioSize {
  readonly maxClients: number;
  readonly maxOperations: number;
}

const skews = fc.constantFrom(0, 0, 30, -30, 400, -400, 900, -900, 3_000, -3_000, 60_000, -60_000);
const delays = fc.constantFrom(0, 0, 20, 80, 250);

/** Arbitrary of one client. */
export const clientPlan: fc.Arbitrary<ClientPlan> = fc.record({
  skewMs: skews,
  requestDelayMs: delays,
  replyDelayMs: delays,
  delayShare: fc.constantFrom(0, 0.2, 0.5, 1),
  lateShare: fc.constantFrom(0, 0, 0, 0.15, 0.4),
  lateByMs: fc.constantFrom(100, 300, 600),
});

const routerOffsets = fc.constantFrom(0, 40, -40, 300, -300, 700, -700, 1_000, -1_000);

/** Arbitrary of the deployment: one server in about half the histories, else a cluster of 1 to 3 routers. */
export const clusterPlan: fc.Arbitrary<ClusterPlan | undefined> = fc.option(
  fc.record({ routers: fc.array(routerOffsets, { minLength: 1, maxLength: 3 }), skew: fc.constantFrom('tight', 'default' as const) }),
  { nil: undefined, freq: 2 },
);

function timed(clients: number): fc.Arbitrary<Timed> {
  return fc.record({
    client: fc.nat({ max: clients - 1 }),
    startAt: fc.nat({ max: 1_200 }),
    abortAfter: fc.option(fc.integer({ min: 0, max: 900 }), { nil: undefined, freq: 3 }),
    holdMs: fc.nat({ max: 900 }),
    wait: fc.constantFrom(0, 300, 2_000, 4_000),
  });
}

/** Arbitrary of one operation for a history with `clients` clients. */
export function operation(clients: number): fc.Arbitrary<Operation> {
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc
        .tuple(timed(clients), fc.constantFrom('w0', 'w1' as const), fc.constantFrom(300, 600, 1_500), fc.constantFrom('plain', 'plain', 'fair', 'folded' as const))
        .map(([t, doc, lease, mode]) => ({ ...t, kind: 'writeLock' as const, doc, lease, mode })),
    },
    // Several waits of one client on one hot document at once: releases hand the lock over (in one write) to the next of them.
    { weight: 3, arbitrary: fc.tuple(timed(clients), fc.integer({ min: 2, max: 5 }), fc.boolean()).map(([t, size, fair]) => ({ ...t, kind: 'burst' as const, size, fair })) },
    { weight: 3, arbitrary: fc.tuple(timed(clients), fc.constantFrom('read', 'read', 'write' as const)).map(([t, tag]) => ({ ...t, kind: 'multiLock' as const, tag })) },
    { weight: 2, arbitrary: fc.tuple(timed(clients), fc.constantFrom(1, 2 as const)).map(([t, permits]) => ({ ...t, kind: 'semaphore' as const, permits })) },
    { weight: 2, arbitrary: fc.tuple(timed(clients), fc.constantFrom('a', 'b' as const)).map(([t, owner]) => ({ ...t, kind: 'reentrant' as const, owner })) },
    { weight: 2, arbitrary: timed(clients).map((t) => ({ ...t, kind: 'upgrade' as const })) },
    // A campaign for one election: its term is the hold (its signal or the scenario's ends it), then it resigns.
    { weight: 2, arbitrary: timed(clients).map((t) => ({ ...t, kind: 'election' as const })) },
    // A writeLock section on w1 that quarantines it for a while as it ends: every acquisition of w1 meanwhile is refused.
    { weight: 1, arbitrary: timed(clients).map((t) => ({ ...t, kind: 'quarantine' as const })) },
    // A job taken with minHold (released early, its entry kept), and calls under a rate limit (a semaphore's permits taken with minHold).
    { weight: 2, arbitrary: fc.tuple(timed(clients), fc.constantFrom(100, 300 as const)).map(([t, minHold]) => ({ ...t, kind: 'runOnce' as const, minHold })) },
    { weight: 2, arbitrary: timed(clients).map((t) => ({ ...t, kind: 'rate' as const })) },
    {
      weight: 3,
      arbitrary: fc
        .tuple(timed(clients), fc.shuffledSubarray(['w0', 'w1', 'g0', 'g0', 'm0:read', 'm0:write', 's0'] as const, { minLength: 2, maxLength: 4 }))
        .filter(([, members]) => new Set(members.map((m) => m.slice(0, 2))).size === members.length)
        .map(([t, members]) => ({ ...t, kind: 'group' as const, members })),
    },
    { weight: 3, arbitrary: fc.tuple(timed(clients), fc.constantFrom('exclusive', 'shared' as const), fc.constantFrom(600, 1_500, undefined)).map(([t, type, ttl]) => ({ ...t, kind: 'resource' as const, type, ttl })) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('purge' as const), client: fc.nat({ max: clients - 1 }), startAt: fc.nat({ max: 1_500 }) }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('hapi' as const),
        startAt: fc.nat({ max: 1_200 }),
        preMs: fc.constantFrom(0, 50, 250),
        handlerMs: fc.constantFrom(0, 50, 250),
        serverTimeout: fc.option(fc.constantFrom(60, 150), { nil: undefined, freq: 2 }),
        disconnectAfter: fc.option(fc.constantFrom(30, 120, 400), { nil: undefined, freq: 2 }),
      }),
    },
  );
}

/** Arbitrary of a whole history. */
export function scenario(size: ScenarioSize): fc.Arbitrary<Scenario> {
  return fc.integer({ min: 2, max: size.maxClients }).chain((clients) =>
    fc.record({
      seed: fc.nat(),
      cluster: clusterPlan,
      clients: fc.array(clientPlan, { minLength: clients, maxLength: clients }),
      operations: fc.array(operation(clients), { minLength: Math.min(6, size.maxOperations), maxLength: size.maxOperations, size: 'max' }),
    }),
  );
}

/** A small seeded PRNG, so that a scenario's delays, late landings and router picks repeat with its seed. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
