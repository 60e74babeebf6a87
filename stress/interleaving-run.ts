/**
 * Runs one generated history (see interleaving-scenario.ts) against a real MongoDB and records,
 * append-only, what each holder believed and how each call ended, for the independent checker
 * (history-checker.ts). Every holder also writes to its document through `handle.guard()` at the
 * start and the end of its hold (a `$push` of `{ holder, fence, mode }` to the document's `log`),
 * through its client's collection: the logs show, in the server's order, whose guarded writes landed.
 * A history on a sharded cluster reaches every collection through simulated routers
 * (simulated-cluster.ts); a client's late acquisitions fail at once and land later (server-faults.ts).
 */
import { settleWithin } from './settle-within';
import { QUARANTINE_TARGET, runQuarantine } from './interleaving-quarantine';
import { minHoldOf, RATE_TARGET, runWithMinHold, type HoldDetails } from './interleaving-min-hold';
import { request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import type { Collection, Db, Document, MongoClient } from 'mongodb';
import { commit, election, isLockError, multiLock, resourceLocks, semaphore, usingAll, writeLock, type GroupRequest, type LockHandle } from '../lib';
import { lockOf, monglockPlugin } from '../lib/hapi';
import { assumedSkew, clientCollection, deploymentOptions, quiescenceBound, quiescentState, type HistoryDeployment, type LateLandingCounts } from './interleaving-deployment';
import { isHandOverCall, type DelayPlan } from './delayed-collection';
import type { FinalState, GuardedWrite, HistoryEvent } from './history-checker';
import { mulberry32, type ClientPlan, type GroupMember, type Operation, type Scenario } from './interleaving-scenario';

/** What a history needs: driver clients (shared by the scenario's clients, round robin) and a database. */
export interface RunContext {
  readonly clients: readonly MongoClient[];
  readonly db: Db;
}

/** A finished history. */
export interface RunResult {
  readonly events: HistoryEvent[];
  readonly final: FinalState;
  /** How the calls ended, by outcome. */
  readonly outcomes: Record<string, number>;
  /** What became of the acquisitions made to land late. */
  readonly lateLandings: LateLandingCounts;
  /** Writes the simulated routers refused for want of the shard key (none expected). */
  readonly refusals: readonly string[];
}

/** Call `timeout` of every client, in ms (above every injected delay), and how long a call may take before it counts as never settled. */
const [CALL_TIMEOUT, SETTLE_BOUND] = [3_000, 20_000];
/** The limit of the semaphore on `s0`. */
const LIMIT = 3;
const RW = { locktimeouts: { read: 800, write: 1_200 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } } };

/** The test machine's clock, which is also the test server's: every recorded time comes from it. */
export const realNow = (): number => performance.timeOrigin + performance.now();

/** Hand-overs sent by the clients of every history so far (a release giving the lock to a waiter of its client in one write). */
export const handOversSent = { count: 0 };
/** Guarded writes of every history so far that matched nothing: the holder's lock had ended (or was taken over) by the server's clock. */
export const guardedWritesRefused = { count: 0 };

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `scenario`; resolves its history and the stored state once everything settled. */
export async function runScenario(scenario: Scenario, context: RunContext): Promise<RunResult> {
  const suffix = `${scenario.seed}_${Math.floor(realNow() % 1e9)}`;
  const docs = context.db.collection(`docs_${suffix}`);
  const lockCollection = context.db.collection(`locks_${suffix}`);
  await docs.insertMany(['w0', 'w1', 'g0', 'm0', 'h0', 'b0', 's0', 'o0', 'j0', 't0'].map((id) => ({ _id: id as never })));
  const events: HistoryEvent[] = [];
  const outcomes: Record<string, number> = {};
  const deployment: HistoryDeployment = { cluster: scenario.cluster, landed: [], refusals: [] };
  const clients = scenario.clients.map((plan, i) => clientLocks(plan, scenario.seed + i, context.clients[i % context.clients.length]!, docs, lockCollection, deployment));
  const hapi = await hapiServer(docs, events);
  try {
    await Promise.all(
      scenario.operations.map(async (operation, op) => {
        await sleep(operation.startAt);
        const outcome = await settleWithin(runOperation(operation, op, clients, hapi, events), SETTLE_BOUND);
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        events.push({ type: 'settled', op, kind: operation.kind, outcome, at: realNow() });
      }),
    );
    const latestLanding = Math.max(0, ...scenario.clients.map((plan) => plan.lateByMs));
    const { final, lateLandings } = await quiescentState([docs, lockCollection], deployment.landed, latestLanding, quiescenceBound(assumedSkew(scenario.cluster), CALL_TIMEOUT));
    return { events, final, outcomes, lateLandings, refusals: deployment.refusals };
  } finally {
    await hapi.server.stop({ timeout: 500 });
    await Promise.all([docs.drop(), lockCollection.drop()].map((p) => p.catch(() => undefined)));
  }
}

type ClientLocks = ReturnType<typeof clientLocks>;

function clientLocks(plan: ClientPlan, seed: number, client: MongoClient, docs: Collection<Document>, locks: Collection<Document>, deployment: HistoryDeployment) {
  const random = mulberry32(seed);
  const delay = (max: number): DelayPlan => () => (max > 0 && random() < plan.delayShare ? Math.floor(random() * max) : 0);
  const requestDelay = delay(plan.requestDelayMs);
  const counting: DelayPlan = (method, n, args) => {
    if (isHandOverCall(method, args)) handOversSent.count++;
    return requestDelay(method, n, args);
  };
  const delays = { request: counting, reply: delay(plan.replyDelayMs) };
  let collections = 0;
  const own = (collection: Collection<Document>): Collection<Document> =>
    clientCollection(client.db(collection.dbName).collection(collection.collectionName), plan, seed * 8 + collections++, deployment, delays);
  const common = { clock: () => realNow() + plan.skewMs, timeout: CALL_TIMEOUT, ...deploymentOptions(deployment.cluster) };
  const [write, multi, permits, resources] = [own(docs), own(docs), own(docs), own(locks)] as const;
  return {
    write: writeLock({ collection: write, locktimeout: 600, ...common }),
    multi: multiLock({ collection: multi, ...RW, ...common }),
    permits: semaphore({ collection: permits, limit: LIMIT, locktimeout: 700, ...common }),
    resources: resourceLocks({ collection: resources, ...common }),
    leaders: election({ collection: write, lease: 600, ...common }),
    /** Where a holder's guarded writes go: the client's collections (through its routers and its delays, as its locks). */
    logs: { docs: write, resources },
  };
}

/** A holder's guarded write: `{ holder, fence, mode }` pushed to its document's `log` only while its lock is held (a failure is the holder's, not the history's). */
async function guardedWrite(collection: Collection<Document>, handle: LockHandle, entry: GuardedWrite): Promise<void> {
  const written = await collection.updateOne(handle.guard(), { $push: { log: entry } } as Document).catch(() => undefined);
  if (written?.matchedCount === 0) guardedWritesRefused.count++;
}

async function runOperation(operation: Operation, op: number, clients: readonly ClientLocks[], hapi: HapiTarget, events: HistoryEvent[]): Promise<unknown> {
  if (operation.kind === 'hapi') return hapi.request(operation);
  const locks = clients[operation.client]!;
  if (operation.kind === 'purge') return locks.resources.purge();
  const docs = locks.logs.docs;
  const controller = new AbortController();
  const timer = operation.abortAfter === undefined ? undefined : setTimeout(() => controller.abort(new Error('aborted by the scenario')), operation.abortAfter);
  const params = { wait: operation.wait, signal: controller.signal };
  try {
    switch (operation.kind) {
      case 'writeLock': {
        const body = hold(events, docs, operation.doc, 'exclusive', operation.holdMs);
        const options = { ...params, locktimeout: operation.lease, ...(operation.mode === 'fair' ? { fair: true } : {}) };
        if (operation.mode !== 'folded') return await locks.write.using({ _id: operation.doc }, options, body);
        // Folded: the section ends with a write of the document applied by the release itself.
        return await locks.write.using({ _id: operation.doc }, { ...options, document: { n: 1 } }, async (handle, signal) => {
          await body(handle, signal);
          return commit({ $inc: { n: 1 } });
        });
      }
      case 'burst': {
        // Each wait of the burst holds for a share of holdMs; the signal (if it aborts) aborts them all.
        const settled = await Promise.allSettled(
          Array.from({ length: operation.size }, (_, i) =>
            locks.write.using({ _id: 'b0' }, { ...params, locktimeout: 600, fair: operation.fair }, hold(events, docs, 'b0', 'exclusive', Math.floor(operation.holdMs / (i + 1)))),
          ),
        );
        const failed = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
        if (failed) throw failed.reason;
        return undefined;
      }
      case 'multiLock':
        return await locks.multi.using({ _id: 'm0' }, { ...params, tag: operation.tag }, hold(events, docs, 'm0', operation.tag === 'read' ? 'shared' : 'exclusive', operation.holdMs));
      case 'semaphore':
        return await locks.permits.using({ _id: 's0' }, { ...params, permits: operation.permits }, hold(events, docs, 's0', 'shared', operation.holdMs, { permits: operation.permits, limit: LIMIT }));
      case 'reentrant':
        // The owner's outer hold, and a nested one inside: one holder (its owner) for the checker.
        return await locks.write.using({ _id: 'o0' }, { ...params, owner: operation.owner, locktimeout: 600 }, async (outer, signal) => {
          await locks.write.using({ _id: 'o0' }, { wait: 0, owner: operation.owner, signal, locktimeout: 600 }, (inner, innerSignal) =>
            hold(events, docs, 'o0', 'exclusive', operation.holdMs, { holder: operation.owner, fence: outer.fence === inner.fence ? inner.fence : -1 })(inner, innerSignal),
          );
        });
      case 'runOnce':
      case 'rate':
        return await runWithMinHold(operation, locks, params, hold(events, docs, operation.kind === 'rate' ? RATE_TARGET : 'j0', operation.kind === 'rate' ? 'shared' : 'exclusive', operation.holdMs, minHoldOf(operation, LIMIT)));
      case 'upgrade':
        // A reader upgraded to write for its section, then back; a second upgrader gives up.
        return await locks.multi.using({ _id: 'm0' }, { ...params, tag: 'read' }, async (handle, signal) => {
          const upgraded = await handle.convert('write', { wait: operation.wait, signal }).then(
            () => true,
            (error: unknown) => {
              if (isLockError(error, 'UpgradeConflict') || isLockError(error, 'CooperativeLock')) return false;
              throw error;
            },
          );
          if (!upgraded) return;
          await hold(events, docs, 'm0', 'exclusive', operation.holdMs)(handle, signal);
          if (!signal.aborted) await handle.convert('read');
        });
      case 'group':
        // Several documents at once, in the scenario's (random) order: each member is its own holder of its document.
        return await usingAll(
          operation.members.map((member) => groupRequest(locks, member)),
          params,
          async (group, signal) => {
            const held = operation.members.map((member, i) => ({ handle: group[i]!, ...memberHold(member) }));
            const write = (): Promise<void> => Promise.all(held.map(({ handle, mode }) => guardedWrite(docs, handle, { holder: handle.id, fence: handle.fence, mode }))).then(() => undefined);
            const { start, end } = await guardedSpan(operation.holdMs, signal, write);
            for (const { handle, target, mode, more } of held) events.push({ type: 'hold', target, holder: handle.id, mode, fence: handle.fence, start, end, ...more });
          },
        );
      case 'quarantine':
        return await runQuarantine(locks.write, params, hold(events, docs, QUARANTINE_TARGET, 'exclusive', operation.holdMs), realNow, (event) => events.push(event));
      case 'election': {
        // A term is the hold of the election's document (created by the first campaign); the checker sees it as an exclusive holder.
        const term = await locks.leaders.campaign({ _id: 'e0' }, params);
        const asHandle = { id: `term-${op}`, fence: term.fence, guard: (extra?: Document) => term.guard(extra) } as unknown as LockHandle;
        try {
          return await hold(events, docs, 'e0', 'exclusive', operation.holdMs)(asHandle, AbortSignal.any([term.signal, controller.signal]));
        } finally {
          await term.resign();
        }
      }
      case 'resource':
        return await locks.resources.using('r0', `op-${op}`, { ...params, ttl: operation.ttl, shared: operation.type === 'shared' }, hold(events, locks.logs.resources, 'r0', operation.type, operation.holdMs));
    }
  } finally {
    clearTimeout(timer);
  }
}

/** The request of a group member. */
function groupRequest(locks: ClientLocks, member: GroupMember): GroupRequest {
  if (member === 's0') return { lock: locks.permits, filter: { _id: 's0' } };
  if (member.startsWith('m0:')) return { lock: locks.multi, filter: { _id: 'm0' }, tag: member.slice(3) };
  return { lock: locks.write, filter: { _id: member } };
}

/** How the checker sees a group member's hold. */
function memberHold(member: GroupMember): { target: string; mode: 'exclusive' | 'shared'; more: { permits?: number; limit?: number } } {
  if (member === 's0') return { target: 's0', mode: 'shared', more: { permits: 1, limit: LIMIT } };
  if (member === 'm0:read') return { target: 'm0', mode: 'shared', more: {} };
  if (member === 'm0:write') return { target: 'm0', mode: 'exclusive', more: {} };
  return { target: member, mode: 'exclusive', more: {} };
}

/**
 * A `using()` body: holds for `holdMs`, and records the span during which it believed the lock
 * protected it: from its start until it ended or its signal aborted, whichever came first. It
 * writes to its document in `log` through `guard()` when it starts and when it ends.
 */
function hold(events: HistoryEvent[], log: Collection<Document>, target: string, mode: 'exclusive' | 'shared', holdMs: number, more: HoldDetails = {}) {
  return async (handle: LockHandle, signal: AbortSignal): Promise<void> => {
    const { holder = handle.id, fence = handle.fence, ...limits } = more;
    const { start, end } = await guardedSpan(holdMs, signal, () => guardedWrite(log, handle, { holder, fence, mode }));
    // Taken with minHold: its acquisition stamp (server time), which the checker's minimum-hold and rate rules judge by.
    const stamp = limits.minHold === undefined && limits.window === undefined ? {} : { stamp: handle.timestamp };
    events.push({ type: 'hold', target, holder, mode, fence, start, end, ...limits, ...stamp });
  };
}

/** {@link heldSpan}, with a guarded write sent as it starts and one once it ended (still inside the hold: before the release). */
async function guardedSpan(holdMs: number, signal: AbortSignal, write: () => Promise<void>): Promise<{ start: number; end: number }> {
  const first = write();
  const span = await heldSpan(holdMs, signal);
  await first;
  await write();
  return span;
}

/** Holds for `holdMs`; resolves the span during which the holder believed itself protected: until then, or until `signal` aborted. */
async function heldSpan(holdMs: number, signal: AbortSignal): Promise<{ start: number; end: number }> {
  const start = realNow();
  const aborted = new Promise<number>((resolve) => {
    if (signal.aborted) resolve(realNow());
    else signal.addEventListener('abort', () => resolve(realNow()), { once: true });
  });
  const abortedAt = await Promise.race([sleep(holdMs).then(() => undefined), aborted]);
  return { start, end: abortedAt ?? realNow() };
}

/** A hapi server with locked routes on `h0` whose pre method and handler record when they run. */
interface HapiTarget {
  readonly server: Hapi.Server;
  request(operation: Extract<Operation, { kind: 'hapi' }>): Promise<number>;
}

async function hapiServer(docs: Collection<Document>, events: HistoryEvent[]): Promise<HapiTarget> {
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  await server.register({ plugin: monglockPlugin });
  const lock = writeLock({ collection: docs, locktimeout: 3_000, timeout: CALL_TIMEOUT });
  const run = async (request: Hapi.Request, ms: number): Promise<void> => {
    const { lock: held } = lockOf(request);
    const { start, end } = await guardedSpan(ms, new AbortController().signal, () => guardedWrite(docs, held, { holder: held.id, fence: held.fence, mode: 'exclusive' }));
    events.push({ type: 'hold', target: 'h0', holder: held.id, mode: 'exclusive', fence: held.fence, start, end });
  };
  for (const timeout of [undefined, 60, 150]) {
    server.route({
      method: 'POST',
      path: `/h${timeout ?? ''}/{id}`,
      options: {
        timeout: timeout === undefined ? undefined : { server: timeout },
        plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), wait: 2_000 } },
        pre: [{ method: async (request: Hapi.Request) => (await run(request, Number(request.query.pre)), null) }],
        handler: async (request: Hapi.Request) => (await run(request, Number(request.query.handler)), 'ok'),
      },
    });
  }
  await server.start();
  const port = server.info.port;
  return {
    server,
    request: (operation) =>
      new Promise<number>((resolve) => {
        const path = `/h${operation.serverTimeout ?? ''}/h0?pre=${operation.preMs}&handler=${operation.handlerMs}`;
        const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST' }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', () => resolve(0));
        });
        req.on('error', () => resolve(0));
        if (operation.disconnectAfter !== undefined) setTimeout(() => req.destroy(), operation.disconnectAfter);
        req.end();
      }),
  };
}
