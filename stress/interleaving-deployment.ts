/**
 * The deployment a randomized history (stress/interleaving-run.ts) runs on, and what is read back
 * from it once every call settled (test infrastructure):
 *
 * - how one client's commands reach the server: through its network (request and reply delays,
 *   stress/delayed-collection.ts), on a sharded cluster through a simulated router picked per
 *   command (its own `$$NOW`, the shard key `{ _id: 1 }`: stress/simulated-cluster.ts), to a server
 *   where a share of its acquisitions block and land late (stress/server-faults.ts);
 * - the stored state the checker reads: the unexpired lock entries and each document's log of
 *   guarded writes, once background releases had the time the library needs
 *   ({@link quiescenceBound}); and how many locks that late acquisitions wrote were left to run
 *   out by their lease rather than released (the library releases such a lock once its write can
 *   no longer land, or lets its lease end first: lib/locks/acquisition.ts).
 */
import type { Collection, Document, UpdateResult } from 'mongodb';
import { delayedCollection, isHandOverCall, type Delays } from './delayed-collection';
import type { FinalState, GuardedWrite, StoredEntry } from './history-checker';
import { clusterSkew, mulberry32, type ClientPlan, type ClusterPlan } from './interleaving-scenario';
import { landingLate, type LateLanding } from './server-faults';
import { simulatedCluster } from './simulated-cluster';
import { realNow } from '../spec/support/clock';

/** The `maxClockSkew` monglock assumes on a sharded cluster when none is given (lib/engine/deployment.ts), in ms. */
const SHARDED_DEFAULT_SKEW = 1_000;
/**
 * The widest stamp tolerance of these histories' locks before the clocks' skew is added, in ms:
 * half the lease, at most 5 s (a resource lock without `ttl`), on a retry after a refusal for
 * lateness (`tolerance` in lib/protocol/server-clock.ts).
 */
const WIDEST_TOLERANCE = 5_000;
/** The slowest round trip of a background release, in ms: a request and a reply each held back by the most a client plan injects (250 ms), and a busy machine's turn. */
const SLOWEST_ROUND_TRIP = 1_000;
/** How long an acquisition made to land late may take to be applied beyond its delay, in ms (a busy machine's timers). */
const LANDING_SLACK = 2_000;

/** What the clients of one history share: the cluster they reach (if any), the acquisitions that landed late, the writes refused for want of the shard key. */
export interface HistoryDeployment {
  readonly cluster: ClusterPlan | undefined;
  readonly landed: LateLanding[];
  readonly refusals: string[];
}

/** The largest skew between the deployment's clocks that its locks assume, in ms (0: one clock). */
export function assumedSkew(cluster: ClusterPlan | undefined): number {
  return cluster ? (clusterSkew(cluster) ?? SHARDED_DEFAULT_SKEW) : 0;
}

/** The options a client's locks get for the deployment: the `maxClockSkew` of a cluster whose plan sets it. */
export function deploymentOptions(cluster: ClusterPlan | undefined): { maxClockSkew?: number } {
  const skew = cluster ? clusterSkew(cluster) : undefined;
  return skew === undefined ? {} : { maxClockSkew: skew };
}

/**
 * `raw` (a collection of the client's own driver client) as the client's locks reach it: outermost
 * its network (`delays`), then, on a cluster, a router picked per command (seeded by `seed`) that
 * fixes `$$NOW`, then the server, where a share (`plan.lateShare`) of its acquisitions block and
 * land `plan.lateByMs` later while the caller is failed at once.
 */
export function clientCollection(raw: Collection<Document>, plan: ClientPlan, seed: number, deployment: HistoryDeployment, delays: Delays): Collection<Document> {
  const lateRandom = mulberry32(seed ^ 0x5bd1e995);
  const pickRandom = mulberry32(seed ^ 0x27d4eb2f);
  const landsLate = (method: string, args: readonly unknown[]): boolean => isAcquisitionWrite(method, args) && lateRandom() < plan.lateShare;
  const blocking = plan.lateShare > 0 ? landingLate(raw, landsLate, plan.lateByMs, deployment.landed) : raw;
  const { cluster } = deployment;
  const routed = cluster
    ? simulatedCluster(blocking, {
        routers: cluster.routers.map((offsetMs) => ({ offsetMs })),
        pick: () => Math.floor(pickRandom() * cluster.routers.length),
        onRefusal: (method, error) => deployment.refusals.push(`${method}: ${error.message}`),
      })
    : blocking;
  return delayedCollection(routed, delays);
}

/** An acquisition (a new lock entry, +1 on the fence), not a hand-over or a conversion: what a client plan may make land late. */
export function isAcquisitionWrite(method: string, args: readonly unknown[]): boolean {
  const update = (args[1] ?? {}) as Document;
  if ((method !== 'findOneAndUpdate' && method !== 'updateOne') || update.$inc?.['lock.fence'] !== 1 || isHandOverCall(method, args)) return false;
  const movesOwnEntry = Object.values((update.$pull ?? {}) as Document).some((condition) => typeof (condition as Document | null)?.id === 'string');
  return !movesOwnEntry && lockIdWrittenBy(args) !== undefined;
}

/** The id of the lock entry a write adds (in its `$set` or `$push`: an object with an `id` and an `exp` date). */
export function lockIdWrittenBy(args: readonly unknown[]): string | undefined {
  const update = (args[1] ?? {}) as Document;
  const values = [update.$set, update.$push].flatMap((operator) => Object.values((operator ?? {}) as Document)).flatMap((value: unknown) => (Array.isArray(value) ? value : [value]));
  const entry = values.find((value): value is { id: string } => typeof value === 'object' && value !== null && typeof (value as Document).id === 'string' && (value as Document).exp instanceof Date);
  return entry?.id;
}

/** What became of the acquisitions made to land late. */
export interface LateLandingCounts {
  readonly sent: number;
  /** Applied by the server (all of them, unless the machine stalled). */
  readonly applied: number;
  /** Of those, the ones that wrote a lock (the others found the document locked, or their stamp too old). */
  readonly wrote: number;
  /** Of those, the locks still stored at the end: left to run out by their lease rather than released. */
  readonly ranOut: number;
}

/** {@link LateLandingCounts} of `landed`, given the ids of the lock entries stored at the end. */
function lateLandingCounts(landed: readonly LateLanding[], stored: ReadonlySet<string>): LateLandingCounts {
  const applied = landed.filter((landing) => landing.appliedAt !== undefined);
  const wrote = applied.filter(({ method, result }) => !(result instanceof Error) && result !== null && result !== undefined && (method !== 'updateOne' || (result as UpdateResult).matchedCount > 0));
  const ranOut = wrote.filter((landing) => stored.has(lockIdWrittenBy(landing.args) ?? ''));
  return { sent: landed.length, applied: applied.length, wrote: wrote.length, ranOut: ranOut.length };
}

/**
 * How long background releases may still run once every call settled, in ms, on a deployment
 * whose clocks are up to `skew` ms apart (`maxClockSkew`), for calls with `timeout`. A lock whose
 * acquisition landed late (or whose reply was lost) is released, and released again at doubling
 * pauses, until its write can no longer land (lib/locks/acquisition.ts): its stamp (taken before
 * the call failed, so before it settled) plus its tolerance (at most {@link WIDEST_TOLERANCE} +
 * 4 skew) plus `timeout` (the command's `maxTimeMS`). The library tells that this instant has
 * passed from the lower bound of the server's clock minus the skew, which lags the shard's clock
 * by up to 3 skew and a round trip; the last pause ends there, and the release sent then is
 * followed by one more: three round trips in all.
 */
export function quiescenceBound(skew: number, timeout: number): number {
  return WIDEST_TOLERANCE + 4 * skew + timeout + 3 * skew + 3 * SLOWEST_ROUND_TRIP;
}

/**
 * The stored state once background releases are over: every late acquisition applied (each was
 * sent at most `latestLandingMs` before), then the unexpired lock entries polled until none is
 * left or `boundMs` passed; with the guarded writes' logs, and what became of the late acquisitions.
 */
export async function quiescentState(
  collections: ReadonlyArray<Collection<Document>>,
  landed: readonly LateLanding[],
  latestLandingMs: number,
  boundMs: number,
): Promise<{ final: FinalState; lateLandings: LateLandingCounts }> {
  const landingsBy = realNow() + latestLandingMs + LANDING_SLACK;
  while (landed.some((landing) => landing.appliedAt === undefined) && realNow() < landingsBy) await sleep(20);
  const deadline = realNow() + boundMs;
  for (;;) {
    const docs = (await Promise.all(collections.map(storedLocks))).flat();
    const liveEntries = docs.flatMap((doc) => doc.entries.filter((entry) => entry.exp > doc.serverNow));
    if (liveEntries.length > 0 && realNow() <= deadline) {
      await sleep(100);
      continue;
    }
    const guardedLogs = docs.filter((doc) => doc.log.length > 0).map((doc) => ({ target: doc.target, entries: doc.log }));
    const stored = new Set(docs.flatMap((doc) => doc.entries.map((entry) => entry.id)));
    return { final: { liveEntries, guardedLogs }, lateLandings: lateLandingCounts(landed, stored) };
  }
}


/** Each document of `collection` as the checker reads it: its lock entries (pending upgrade marks included), its guarded writes' log, the server's clock. */
async function storedLocks(collection: Collection<Document>): Promise<Array<{ target: string; serverNow: number; entries: StoredEntry[]; log: GuardedWrite[] }>> {
  const docs = await collection.aggregate([{ $addFields: { serverNow: '$$NOW' } }]).toArray();
  return docs.map((doc) => {
    const target = String(doc._id);
    const tags = (doc.lock?.tags ?? {}) as Record<string, Array<{ id: string; exp: Date }>>;
    // A pending upgrade's mark left live counts as a leak too: it refuses new locks.
    const marks = ((doc.lock?.upgrade ?? []) as Array<{ id: string; tag: string; exp: Date }>).map((mark) => [`upgrade to ${mark.tag}`, [mark]] as const);
    const entries = [...Object.entries(tags), ...marks].flatMap(([tag, list]) => (list ?? []).map((entry) => ({ target, tag, id: entry.id, exp: entry.exp.getTime() })));
    return { target, serverNow: (doc.serverNow as Date).getTime(), entries, log: (doc.log ?? []) as GuardedWrite[] };
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
