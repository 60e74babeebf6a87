/**
 * The doctor's checks that write, all to one scratch document of a scratch collection
 * (`monglock_doctor`, in the database of the collection checked; never to the caller's documents):
 * the skew between a router's `$$NOW` and a shard's `$currentDate`, the latency of majority writes,
 * and whether change streams deliver.
 */
import { randomBytes } from 'node:crypto';
import type { ChangeStream, Collection, Document } from 'mongodb';
import { clockReadOperation } from '../../protocol/resource-document';
import { withDeadline } from '../../engine/store';
import { monotonicNow } from '../../common/options';
import { awaitOptions, lockChanges } from '../../waiting/change-feed';
import { reason, type ServerFacts } from './doctor-checks';
import { finding, type DoctorFinding } from './doctor-report';

/** The scratch collection: created by the doctor's first write, dropped when no doctor's document is left in it. */
export const SCRATCH_COLLECTION = 'monglock_doctor';

/** How many times each measurement is repeated. */
const ROUNDS = 5;
/** How long a change stream is given to deliver the scratch write, in ms. */
const CHANGE_WAIT_MS = 2_000;

/** A way to the deployment: the collection as one mongos (or the client's own choice of server) routes it. */
export interface Route {
  /** Where commands went: `host:port` of a mongos reached on its own, or the client's hosts. */
  readonly via: string;
  readonly collection: Collection<Document>;
}

/** This run's scratch document: its `_id`, an object no other run shares. */
export interface Scratch {
  readonly id: Document;
}

/** A new scratch document for one run. */
export function newScratch(): Scratch {
  return { id: { doctor: randomBytes(8).toString('hex') } };
}

/** The scratch collection as `route` reaches it. */
const scratchOf = (route: Route): Collection<Document> => route.collection.db.collection(SCRATCH_COLLECTION);
/** Tenths of a ms. */
const round1 = (value: number): number => Math.round(value * 10) / 10;
/** A signed duration, to a tenth of a ms. */
const ms = (value: number): string => {
  const rounded = round1(value);
  return `${rounded >= 0 ? '+' : '-'}${Math.abs(rounded).toFixed(1)} ms`;
};

/** Stamps the scratch document with the server's clock (`$currentDate`); resolves the date written. */
async function stampScratch(route: Route, scratch: Scratch, timeout: number, writeConcern?: Document): Promise<Date | undefined> {
  const { filter, update } = clockReadOperation(scratch.id);
  const doc = await withDeadline('findAndModify', timeout, () =>
    scratchOf(route).findOneAndUpdate(filter, update, { upsert: true, returnDocument: 'after', projection: { now: 1 }, ...(writeConcern && { writeConcern }) }),
  );
  return doc?.now instanceof Date ? doc.now : undefined;
}

/** `$$NOW` as the router sets it: read on the collection checked (one document), or on the scratch collection when that one is empty. */
async function routerNow(route: Route, timeout: number): Promise<{ now: Date; sentAt: number; arrivedAt: number; readOn: string } | undefined> {
  const pipeline = [{ $limit: 1 }, { $project: { _id: 0, now: '$$NOW' } }];
  for (const [readOn, collection] of [[route.collection.collectionName, route.collection], [SCRATCH_COLLECTION, scratchOf(route)]] as const) {
    const sentAt = monotonicNow();
    const [row] = await withDeadline('aggregate', timeout, () => collection.aggregate(pipeline, { readPreference: 'primary' }).toArray());
    const arrivedAt = monotonicNow();
    if (row?.now instanceof Date) return { now: row.now, sentAt, arrivedAt, readOn };
  }
  return undefined;
}

/** One measurement: bounds on (router's clock − shard's clock), from a stamp and a read each timed locally (dates read back to the ms). */
async function skewRound(route: Route, scratch: Scratch, timeout: number): Promise<{ low: number; high: number; readOn: string }> {
  const sentAt = monotonicNow();
  const stamped = await stampScratch(route, scratch, timeout);
  const arrivedAt = monotonicNow();
  const read = await routerNow(route, timeout);
  if (!stamped || !read) throw new Error('the server returned no date for $currentDate or $$NOW');
  // The shard's clock read `stamped` at some local instant in [sentAt, arrivedAt]; the router's read `read.now` in [read.sentAt, read.arrivedAt].
  const shard = stamped.getTime();
  const router = read.now.getTime();
  return { low: router - read.arrivedAt - (shard + 1 - sentAt), high: router + 1 - read.sentAt - (shard - arrivedAt), readOn: read.readOn };
}

/**
 * `clock-skew` through `route`: the narrowest of `ROUNDS` intervals on `$$NOW` − `$currentDate`,
 * judged against `maxClockSkew`. Failing when the whole interval lies beyond it (a lock's expiry
 * judged by one clock could pass early by the other); a warning when only part of it does on a
 * sharded cluster (the round trips are too long to tell).
 */
export async function clockSkewFinding(route: Route, scratch: Scratch, deployment: ServerFacts, maxClockSkew: number): Promise<DoctorFinding> {
  let best: { low: number; high: number; readOn: string } | undefined;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const measured = await skewRound(route, scratch, deployment.timeout);
      if (!best || measured.high - measured.low < best.high - best.low) best = measured;
    }
  } catch (error) {
    return finding('clock-skew', 'warn', `via ${route.via}: not measured: ${reason(error)}`, { via: route.via, error: reason(error), maxClockSkew }, 'measure it again when the server answers; until then the skew is unknown');
  }
  const { low, high, readOn } = best!;
  const skew = (low + high) / 2;
  const certain = Math.max(0, low, -high);
  const worst = Math.max(Math.abs(low), Math.abs(high));
  const sharded = deployment.kind === 'sharded cluster';
  const suggested = Math.ceil((worst + Math.max(100, worst / 2)) / 100) * 100;
  const values = { via: route.via, skewMs: round1(skew), lowMs: round1(low), highMs: round1(high), rounds: ROUNDS, readOn, maxClockSkew, ...(sharded && { suggestedMaxClockSkew: suggested }) };
  const measured = `$$NOW (${sharded ? 'mongos' : 'server'}) − $currentDate (${sharded ? 'shard primary' : 'server'}) via ${route.via}: ${ms(skew)} (between ${ms(low)} and ${ms(high)}, the narrowest of ${ROUNDS} rounds)`;
  if (certain > maxClockSkew) {
    const fix = sharded ? `synchronize the clocks of the mongos and shard hosts (NTP), or give the locks maxClockSkew: ${suggested} (the measured skew and a margin)` : 'one server should have one clock: check what answers at this address';
    return finding('clock-skew', 'fail', `${measured}: beyond the ${maxClockSkew} ms maxClockSkew the locks assume`, values, fix);
  }
  if (sharded && worst > maxClockSkew) {
    return finding('clock-skew', 'warn', `${measured}: may exceed the ${maxClockSkew} ms maxClockSkew the locks assume (the round trips are too long to tell)`, values, `measure again from a host near the cluster, or give the locks maxClockSkew: ${suggested}`);
  }
  const within = sharded ? `within the ${maxClockSkew} ms maxClockSkew the locks assume` : 'one clock: within the round trip';
  return finding('clock-skew', 'ok', `${measured}: ${within}`, values, sharded && suggested < maxClockSkew ? `nothing to change (maxClockSkew: ${suggested} would also hold, and lets an abandoned lock be taken over sooner)` : 'nothing to change');
}


/** `majority-writes`: the latency of `ROUNDS` `w: 'majority'` writes to the scratch document (median and max), or how they were refused. */
export async function majorityWritesFinding(route: Route, scratch: Scratch, deployment: ServerFacts): Promise<DoctorFinding> {
  const times: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const sentAt = monotonicNow();
      await stampScratch(route, scratch, deployment.timeout, { w: 'majority' });
      times.push(monotonicNow() - sentAt);
    }
  } catch (error) {
    const standalone = deployment.kind === 'standalone';
    const summary = `a w: 'majority' write ${times.length === 0 ? 'was refused' : `failed after ${times.length}`}: ${reason(error)}`;
    if (standalone) return finding('majority-writes', 'warn', `${summary} (a standalone has no majority to wait for)`, { error: reason(error), acknowledged: times.length }, "monglock sends w: 'majority' by default: give the locks w: 1 on a standalone, or run a replica set");
    return finding('majority-writes', 'fail', summary, { error: reason(error), acknowledged: times.length }, "monglock's writes wait for a majority: make a majority of the voting members reachable");
  }
  const sorted = [...times].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  const max = sorted[sorted.length - 1]!;
  const values = { writes: ROUNDS, medianMs: round1(median), maxMs: round1(max) };
  const how = deployment.kind === 'standalone' ? ' (a standalone acknowledged them as w: 1: nothing to replicate)' : '';
  return finding('majority-writes', 'ok', `${ROUNDS} w: 'majority' writes acknowledged${how}: median ${median.toFixed(1)} ms, max ${max.toFixed(1)} ms`, values);
}

/** `change-streams`: whether a watcher of the scratch collection gets an update there within `CHANGE_WAIT_MS`. Never failing: monglock's waiters poll. */
export async function changeStreamFinding(route: Route, scratch: Scratch, deployment: ServerFacts, field: string): Promise<DoctorFinding> {
  const polling = `waiters of other processes learn of a release only by polling (tens of ms later; monglock watch polls too)`;
  const advice = 'on a replica set or a sharded cluster, grant the changeStream and find actions on the collection; a standalone server has no change streams (nothing to change there)';
  // The stream a waiter opens: monglock's filter on the lock field of this collection (the privilege and the pipeline it needs).
  const streams: ChangeStream[] = [];
  const reads: Array<Promise<unknown>> = [];
  /** The stream's next event, within the check's timeout (the read itself is kept, to be waited for before the stream is closed). */
  const next = (stream: ChangeStream, name: string): Promise<Document | null> => {
    const read = stream.tryNext();
    reads.push(read.catch(() => undefined));
    return withDeadline(name, deployment.timeout, () => read);
  };
  try {
    const own = route.collection.watch(lockChanges(field), awaitOptions(route.collection, 200));
    streams.push(own);
    await next(own, 'aggregate'); // a refused $changeStream throws here
    const scratchCollection = scratchOf(route);
    const stream = scratchCollection.watch([], awaitOptions(scratchCollection, 200));
    streams.push(stream);
    await next(stream, 'aggregate');
    const { filter, update } = clockReadOperation(scratch.id);
    const sentAt = monotonicNow();
    await withDeadline('update', deployment.timeout, () => scratchCollection.updateOne(filter, update, { upsert: true }));
    while (monotonicNow() - sentAt < CHANGE_WAIT_MS) {
      if (await next(stream, 'getMore')) {
        const latency = monotonicNow() - sentAt;
        const summary = `yes: monglock's change stream on ${route.collection.collectionName} opened, and a watcher of ${SCRATCH_COLLECTION} got an update after ${latency.toFixed(1)} ms: waiters of other processes are woken by their releases`;
        return finding('change-streams', 'ok', summary, { works: true, latencyMs: round1(latency) });
      }
    }
    return finding('change-streams', 'warn', `no: a watcher of ${SCRATCH_COLLECTION} got no event within ${CHANGE_WAIT_MS} ms of an update: ${polling}`, { works: false, waitedMs: CHANGE_WAIT_MS }, advice);
  } catch (error) {
    return finding('change-streams', 'warn', `no: $changeStream failed: ${reason(error)}: ${polling}`, { works: false, error: reason(error) }, advice);
  } finally {
    // A stream closed before its aggregate answered would leave the cursor that answer opens: each is closed once its reads came back (waited for a while).
    const closed = Promise.all(reads).then(() => Promise.all(streams.map((stream) => stream.close())).catch(() => undefined));
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, deployment.timeout).unref())]);
  }
}

/** Deletes this run's scratch document, and drops the scratch collection when no other run's is left in it. */
export async function cleanScratch(route: Route, scratch: Scratch, timeout: number): Promise<void> {
  const collection = scratchOf(route);
  await withDeadline('delete', timeout, () => collection.deleteOne({ _id: scratch.id })).catch(() => undefined);
  const left = await withDeadline('count', timeout, () => collection.countDocuments({})).catch(() => 1);
  if (left === 0) await withDeadline('drop', timeout, () => collection.drop()).catch(() => undefined);
}
