/**
 * Runs one generated history (see interleaving-scenario.ts) against a real MongoDB and records,
 * append-only, what each holder believed and how each call ended, for the independent checker
 * (history-checker.ts).
 */
import { request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import type { Collection, Db, Document, MongoClient } from 'mongodb';
import { commit, isLockError, multiLock, resourceLocks, semaphore, usingAll, writeLock, type GroupRequest, type LockHandle } from '../lib';
import { lockOf, monglockPlugin } from '../lib/hapi';
import { delayedCollection, isHandOverCall, type DelayPlan } from './delayed-collection';
import type { FinalState, HistoryEvent } from './history-checker';
import type { ClientPlan, GroupMember, Operation, Scenario } from './interleaving-scenario';

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
}

/** Call `timeout` of every client, in ms: above every injected delay. */
const CALL_TIMEOUT = 3_000;
/** How long a call may take before it counts as never settled, in ms. */
const SETTLE_BOUND = 20_000;
/** How long background releases get to land once every call settled, in ms. */
const QUIESCENCE = 4_000;
/** The limit of the semaphore on `s0`. */
const LIMIT = 3;
const RW = {
  locktimeouts: { read: 800, write: 1_200 },
  lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
};

/** The test machine's clock, which is also the test server's: every recorded time comes from it. */
export const realNow = (): number => performance.timeOrigin + performance.now();

/** Hand-overs sent by the clients of every history so far (a release giving the lock to a waiter of its client in one write). */
export const handOversSent = { count: 0 };

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `scenario`; resolves its history and the stored state once everything settled. */
export async function runScenario(scenario: Scenario, context: RunContext): Promise<RunResult> {
  const suffix = `${scenario.seed}_${Math.floor(realNow() % 1e9)}`;
  const docs = context.db.collection(`docs_${suffix}`);
  const lockCollection = context.db.collection(`locks_${suffix}`);
  await docs.insertMany(['w0', 'w1', 'g0', 'm0', 'h0', 'b0', 's0', 'o0'].map((id) => ({ _id: id as never })));
  const events: HistoryEvent[] = [];
  const outcomes: Record<string, number> = {};
  const clients = scenario.clients.map((plan, i) => clientLocks(plan, scenario.seed + i, context.clients[i % context.clients.length]!, docs, lockCollection));
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
    const final = await quiescentState([docs, lockCollection]);
    return { events, final, outcomes };
  } finally {
    await hapi.server.stop({ timeout: 500 });
    await Promise.all([docs.drop(), lockCollection.drop()].map((p) => p.catch(() => undefined)));
  }
}

type ClientLocks = ReturnType<typeof clientLocks>;

function clientLocks(plan: ClientPlan, seed: number, client: MongoClient, docs: Collection<Document>, locks: Collection<Document>) {
  const random = mulberry32(seed);
  const delay = (max: number): DelayPlan => () => (max > 0 && random() < plan.delayShare ? Math.floor(random() * max) : 0);
  const requestDelay = delay(plan.requestDelayMs);
  const counting: DelayPlan = (method, n, args) => {
    if (isHandOverCall(method, args)) handOversSent.count++;
    return requestDelay(method, n, args);
  };
  const delays = { request: counting, reply: delay(plan.replyDelayMs) };
  const own = (collection: Collection<Document>): Collection<Document> =>
    delayedCollection(client.db(collection.dbName).collection(collection.collectionName), delays);
  const common = { clock: () => realNow() + plan.skewMs, timeout: CALL_TIMEOUT };
  return {
    write: writeLock({ collection: own(docs), locktimeout: 600, ...common }),
    multi: multiLock({ collection: own(docs), ...RW, ...common }),
    permits: semaphore({ collection: own(docs), limit: LIMIT, locktimeout: 700, ...common }),
    resources: resourceLocks({ collection: own(locks), ...common }),
  };
}

async function runOperation(operation: Operation, op: number, clients: readonly ClientLocks[], hapi: HapiTarget, events: HistoryEvent[]): Promise<unknown> {
  if (operation.kind === 'hapi') return hapi.request(operation);
  const locks = clients[operation.client]!;
  if (operation.kind === 'purge') return locks.resources.purge();
  const controller = new AbortController();
  const timer = operation.abortAfter === undefined ? undefined : setTimeout(() => controller.abort(new Error('aborted by the scenario')), operation.abortAfter);
  const params = { wait: operation.wait, signal: controller.signal };
  try {
    switch (operation.kind) {
      case 'writeLock': {
        const body = hold(events, operation.doc, 'exclusive', operation.holdMs);
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
            locks.write.using({ _id: 'b0' }, { ...params, locktimeout: 600, fair: operation.fair }, hold(events, 'b0', 'exclusive', Math.floor(operation.holdMs / (i + 1)))),
          ),
        );
        const failed = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
        if (failed) throw failed.reason;
        return undefined;
      }
      case 'multiLock':
        return await locks.multi.using({ _id: 'm0' }, { ...params, tag: operation.tag }, hold(events, 'm0', operation.tag === 'read' ? 'shared' : 'exclusive', operation.holdMs));
      case 'semaphore':
        return await locks.permits.using({ _id: 's0' }, { ...params, permits: operation.permits }, hold(events, 's0', 'shared', operation.holdMs, { permits: operation.permits, limit: LIMIT }));
      case 'reentrant':
        // The owner's outer hold, and a nested one inside: one holder (its owner) for the checker.
        return await locks.write.using({ _id: 'o0' }, { ...params, owner: operation.owner, locktimeout: 600 }, async (outer, signal) => {
          await locks.write.using({ _id: 'o0' }, { wait: 0, owner: operation.owner, signal, locktimeout: 600 }, (inner, innerSignal) =>
            hold(events, 'o0', 'exclusive', operation.holdMs, { holder: operation.owner, fence: outer.fence === inner.fence ? inner.fence : -1 })(inner, innerSignal),
          );
        });
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
          await hold(events, 'm0', 'exclusive', operation.holdMs)(handle, signal);
          if (!signal.aborted) await handle.convert('read');
        });
      case 'group':
        // Several documents at once, in the scenario's (random) order: each member is its own holder of its document.
        return await usingAll(
          operation.members.map((member) => groupRequest(locks, member)),
          params,
          async (group, signal) => {
            const { start, end } = await heldSpan(operation.holdMs, signal);
            operation.members.forEach((member, i) => {
              const { target, mode, more } = memberHold(member);
              events.push({ type: 'hold', target, holder: group[i]!.id, mode, fence: group[i]!.fence, start, end, ...more });
            });
          },
        );
      case 'resource':
        return await locks.resources.using('r0', `op-${op}`, { ...params, ttl: operation.ttl, shared: operation.type === 'shared' }, hold(events, 'r0', operation.type, operation.holdMs));
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
 * protected it: from its start until it ended or its signal aborted, whichever came first.
 */
function hold(events: HistoryEvent[], target: string, mode: 'exclusive' | 'shared', holdMs: number, more: { permits?: number; limit?: number; holder?: string; fence?: number } = {}) {
  return async (handle: LockHandle, signal: AbortSignal): Promise<void> => {
    const { start, end } = await heldSpan(holdMs, signal);
    const { holder = handle.id, fence = handle.fence, ...limits } = more;
    events.push({ type: 'hold', target, holder, mode, fence, start, end, ...limits });
  };
}

/** Holds for `holdMs`; resolves the span during which the holder believed itself protected: until then, or until `signal` aborted. */
async function heldSpan(holdMs: number, signal: AbortSignal): Promise<{ start: number; end: number }> {
  const start = realNow();
  let abortedAt: number | undefined;
  const aborted = new Promise<void>((resolve) => {
    const onAbort = (): void => {
      abortedAt = realNow();
      resolve();
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  await Promise.race([sleep(holdMs), aborted]);
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
    const start = realNow();
    await sleep(ms);
    events.push({ type: 'hold', target: 'h0', holder: held.id, mode: 'exclusive', fence: held.fence, start, end: realNow() });
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

/** `ok`, the error's subtype or name, or `unsettled` when `promise` did not settle within `ms`. */
async function settleWithin(promise: Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve('unsettled'), ms);
  });
  const outcome = promise.then(
    () => 'ok',
    (error: unknown) => String((error as { subtype?: unknown; name?: unknown })?.subtype ?? (error as { name?: unknown })?.name ?? 'error'),
  );
  try {
    return await Promise.race([outcome, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The unexpired lock entries left in `collections` by the server's clock, once background
 * releases had up to {@link QUIESCENCE} ms to land.
 */
async function quiescentState(collections: ReadonlyArray<Collection<Document>>): Promise<FinalState> {
  const deadline = realNow() + QUIESCENCE;
  for (;;) {
    const liveEntries = (await Promise.all(collections.map(liveEntriesIn))).flat();
    if (liveEntries.length === 0 || realNow() > deadline) return { liveEntries };
    await sleep(100);
  }
}

async function liveEntriesIn(collection: Collection<Document>): Promise<FinalState['liveEntries'][number][]> {
  const docs = await collection.aggregate([{ $addFields: { serverNow: '$$NOW' } }]).toArray();
  return docs.flatMap((doc) => {
    const now = (doc.serverNow as Date).getTime();
    const tags = (doc.lock?.tags ?? {}) as Record<string, Array<{ id: string; exp: Date }>>;
    // A pending upgrade's mark left live counts as a leak too: it refuses new locks.
    const marks = ((doc.lock?.upgrade ?? []) as Array<{ id: string; tag: string; exp: Date }>).map((mark) => [`upgrade to ${mark.tag}`, [mark]] as const);
    return [...Object.entries(tags), ...marks].flatMap(([tag, entries]) =>
      (entries ?? []).filter((entry) => entry.exp.getTime() > now).map((entry) => ({ target: String(doc._id), tag, id: entry.id, exp: entry.exp.getTime() })),
    );
  });
}

/** A small seeded PRNG, so that a scenario's delays repeat with its seed. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
