/**
 * How each row of the lifecycle table (lifecycle-table.ts) is made to happen: the route's hapi
 * options around the column's answer, what is set up on the server before and after monglock is
 * registered, the request, and what the case does meanwhile (a disconnect, a stop).
 */
import { Readable } from 'node:stream';
import * as Boom from '@hapi/boom';
import type Hapi from '@hapi/hapi';
import type { Column } from './lifecycle-table';
import { lockOf } from '../../../lib/hapi';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What a row's route code can use of its case. */
export interface Probe {
  readonly column: Column;
  readonly transport: 'http' | 'inject';
  /** The column's successful answer: a value, `commit(update, value)`, `commitAll(updates, value)`, the lock. */
  answer(request: Hapi.Request): unknown;
  /** The column's answer with `value` in place of its value (a checkout's value is the lock itself). */
  answerWith(request: Hapi.Request, value: unknown): unknown;
  /** Resolves once the client had the status line, or after `ms` (route code that must outlive the answer). */
  untilAnswered(ms: number): Promise<void>;
  /** Resolves once server.stop() began (onPreStop). */
  readonly stopBegan: Promise<void>;
  /** Route code tells it runs. */
  started(): void;
  /** Takes the lock of document `a` from its holder (v2's forced release, proof-less), as another process may. */
  forceRelease(): Promise<void>;
}

/** How the case drives the request besides sending it. */
export type Drive = 'send' | 'disconnect' | 'stop-waiting' | 'stop-running' | 'stop-committing';

/** How one row is made to happen. */
export interface Plan {
  readonly method?: 'GET' | 'POST';
  /** The request: its method (HEAD) and headers. */
  readonly request?: { readonly method?: string; readonly headers?: Record<string, string> };
  /** The route's hapi options (not its plugins). */
  route(probe: Probe): Omit<Hapi.RouteOptions, 'plugins'>;
  /** Set up on the server before monglock is registered. */
  before?(server: Hapi.Server): Promise<void> | void;
  /** Set up on the server after monglock is registered (before the route is added). */
  after?(server: Hapi.Server): Promise<void> | void;
  /** The route is added before monglock is registered. */
  readonly routeFirst?: boolean;
  readonly drive?: Drive;
  /** The route waits for its lock (held elsewhere by the case). */
  readonly wait?: number;
  /** The replies to the lock's writes after its acquisition never come (the call's timeout, 1 s, ends each). */
  readonly lostReplies?: boolean;
  /** The route's lock settings besides its lock, filter(s), mode and wait. */
  readonly settings?: { readonly maxHold?: number; readonly locktimeout?: number };
}

/** The column's answer, returned by the handler. */
const answers = (probe: Probe): Hapi.Lifecycle.Method => (request) => probe.answer(request) as Hapi.Lifecycle.ReturnValue;
/** The column's answer in a response object `shape` adjusts. */
const responding = (probe: Probe, shape: (response: Hapi.ResponseObject) => Hapi.ResponseObject): Hapi.Lifecycle.Method => (request, h) => shape(h.response(probe.answer(request) as never));

/** A stream body: its first chunk, then the rest once the client had the status line. */
function streamed(probe: Probe, text: string): Readable {
  return Readable.from(
    (async function* () {
      yield Buffer.from(text.slice(0, 1));
      await probe.untilAnswered(1_000);
      yield Buffer.from(text.slice(1));
    })(),
    { objectMode: false },
  );
}

const refuse = (): never => {
  throw Boom.forbidden('not yours');
};

/** A plugin whose onPreResponse takes over (an envelope) or throws. */
function answeringPlugin(name: string, how: 'takeover' | 'throws'): Hapi.Plugin<unknown> & { name: string } {
  return { name, register: (server) => server.ext('onPreResponse', onPreResponse(how)) };
}

function onPreResponse(how: 'takeover' | 'throws'): Hapi.Lifecycle.Method {
  return (_request, h) => {
    if (how === 'throws') throw new Error('the extension failed');
    return h.response({ envelope: true }).takeover();
  };
}

/** The plans, by row id. */
export const PLANS: Record<string, Plan> = {
  value: { route: (probe) => ({ handler: answers(probe) }) },
  response: { route: (probe) => ({ handler: responding(probe, (response) => response.code(201)) }) },
  stream: {
    route: (probe) => ({ handler: (request) => probe.answerWith(request, streamed(probe, probe.column === 'checkout' ? JSON.stringify(lockOf(request).lock) : 'a,b,c')) as never }),
  },
  takeover: {
    route: (probe) => ({
      pre: [{ method: (request, h) => h.response(probe.column === 'checkout' ? { lock: lockOf(request).lock } : { early: true }).takeover() }],
      handler: answers(probe),
    }),
  },
  boom: {
    route: () => ({
      handler: () => {
        throw Boom.badData('the count is odd');
      },
    }),
  },
  pre: { route: (probe) => ({ pre: [{ method: refuse }], handler: answers(probe) }) },
  'parallel-pre': {
    route: (probe) => ({ pre: [[{ method: async () => (await probe.untilAnswered(300), 'slow') }, { method: refuse }]], handler: answers(probe) }),
  },
  'fail-action': {
    route: (probe) => ({ pre: [{ method: refuse, failAction: (_request, h) => h.response({ refused: true }).code(400).takeover() }], handler: answers(probe) }),
  },
  'response-validation': {
    route: (probe) => ({
      response: {
        schema: () => {
          throw new Error('not the documented shape');
        },
      },
      handler: answers(probe),
    }),
  },
  close: { route: () => ({ handler: (_request, h) => h.close }) },
  'close-pre': { route: (probe) => ({ pre: [{ method: (_request, h) => h.close }], handler: answers(probe) }) },
  'close-post-handler': { route: (probe) => ({ ext: { onPostHandler: { method: (_request, h) => h.close } }, handler: answers(probe) }) },
  'max-hold-after': { settings: { maxHold: 250 }, route: (probe) => ({ handler: answers(probe) }) },
  'max-hold': {
    settings: { maxHold: 200 },
    // Ignores what its signal says: answers once it aborted (maxHold released the lock).
    route: (probe) => ({ handler: async (request) => (await Promise.race([aborted(lockOf(request).signal), sleep(3_000)]), probe.answer(request) as never) }),
  },
  'lease-lost': {
    settings: { locktimeout: 1_000 },
    route: (probe) => ({
      handler: async (request) => {
        await probe.forceRelease();
        await Promise.race([aborted(lockOf(request).signal), sleep(3_000)]); // the next extension is refused
        return probe.answer(request) as never;
      },
    }),
  },
  abandon: {
    route: () => ({
      handler: (request, h) => {
        request.raw.res.writeHead(200, { 'content-type': 'text/plain' });
        request.raw.res.end('answered by hand');
        return h.abandon;
      },
    }),
  },
  timeout: { route: (probe) => ({ timeout: { server: 100 }, handler: async (request) => (await probe.untilAnswered(3_000), probe.answer(request) as never) }) },
  disconnect: {
    method: 'GET',
    drive: 'disconnect',
    route: (probe) => ({ handler: async (request) => (probe.started(), await probe.untilAnswered(3_000), probe.answer(request) as never) }),
  },
  // A POST: hapi notices the client left once the handler ended (it then skips onPreResponse).
  'disconnect-post': { drive: 'disconnect', route: (probe) => ({ handler: async (request) => (probe.started(), await sleep(200), probe.answer(request) as never) }) },
  header: { route: (probe) => ({ handler: responding(probe, (response) => response.header('content-disposition', 'attachment; filename="\u20ac.txt"')) }) },
  cookie: { route: (probe) => ({ handler: responding(probe, (response) => response.state('session', 'a;b')) }) },
  'earlier-plugin-takeover': { before: (server) => server.register(answeringPlugin('envelope', 'takeover')), route: (probe) => ({ handler: answers(probe) }) },
  'earlier-plugin-throws': { before: (server) => server.register(answeringPlugin('failing', 'throws')), route: (probe) => ({ handler: answers(probe) }) },
  'later-plugin-takeover': { after: (server) => server.register(answeringPlugin('envelope', 'takeover')), route: (probe) => ({ handler: answers(probe) }) },
  'later-plugin-throws': { after: (server) => server.register(answeringPlugin('failing', 'throws')), route: (probe) => ({ handler: answers(probe) }) },
  'server-first-takeover': { before: (server) => server.ext('onPreResponse', onPreResponse('takeover')), route: (probe) => ({ handler: answers(probe) }) },
  'server-first-throws': { before: (server) => server.ext('onPreResponse', onPreResponse('throws')), route: (probe) => ({ handler: answers(probe) }) },
  'route-ext-takeover': { route: (probe) => ({ ext: { onPreResponse: { method: onPreResponse('takeover') } }, handler: answers(probe) }) },
  'route-ext-throws': { route: (probe) => ({ ext: { onPreResponse: { method: onPreResponse('throws') } }, handler: answers(probe) }) },
  'early-route-ext-takeover': { routeFirst: true, route: (probe) => ({ ext: { onPreResponse: { method: onPreResponse('takeover') } }, handler: answers(probe) }) },
  'early-route-ext-throws': { routeFirst: true, route: (probe) => ({ ext: { onPreResponse: { method: onPreResponse('throws') } }, handler: answers(probe) }) },
  head: { method: 'GET', request: { method: 'HEAD' }, route: (probe) => ({ handler: answers(probe) }) },
  '204': { route: (probe) => ({ handler: responding(probe, (response) => response.code(204)) }) },
  '205': { route: (probe) => ({ handler: responding(probe, (response) => response.code(205)) }) },
  '206': { method: 'GET', request: { headers: { range: 'bytes=0-3' } }, route: (probe) => ({ handler: answers(probe) }) },
  '304': { method: 'GET', request: { headers: { 'if-none-match': '"v1"' } }, route: (probe) => ({ handler: responding(probe, (response) => response.etag('v1')) }) },
  'timeout-waiting': { wait: 10_000, route: (probe) => ({ timeout: { server: 100 }, handler: answers(probe) }) },
  'stop-waiting': { drive: 'stop-waiting', wait: 10_000, route: (probe) => ({ handler: answers(probe) }) },
  'stop-running': {
    drive: 'stop-running',
    route: (probe) => ({
      handler: async (request) => {
        probe.started();
        await probe.stopBegan;
        // Through inject, hapi waits for no request: onPostStop aborts the signal at once.
        await Promise.race([aborted(lockOf(request).signal), sleep(probe.transport === 'inject' ? 3_000 : 50)]);
        return probe.answer(request) as never;
      },
    }),
  },
  'stop-committing': { drive: 'stop-committing', route: (probe) => ({ handler: answers(probe) }) },
  'commit-unknown': { lostReplies: true, route: (probe) => ({ handler: answers(probe) }) },
};

/** Resolves once `signal` aborts. */
function aborted(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** The plan of row `id` (the rows run through inject share their HTTP row's plan). */
export function planOf(id: string): Plan {
  const plan = PLANS[id.replace(/-inject$/, '')];
  if (!plan) throw new Error(`no plan for row ${id}`);
  return plan;
}
