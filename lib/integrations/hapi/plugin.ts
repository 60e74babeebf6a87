import type { NamedPlugin, Request, RequestRoute, ResponseToolkit, Server } from '@hapi/hapi';
import type { Document } from 'mongodb';
import { withOrigin } from '../../common/background';
import { isLockError, lockError, type BoomLike } from '../../common/errors';
import { acquireGroup } from '../../groups/acquire-all';
import type { LockGroup } from '../../groups/lock-group';
import { heldGroup, heldLock, type Held } from './held';
import { trackRequests } from './lifecycle';
import { preResponseFirst } from './pre-response-first';
import { routeName } from './route-methods';
import { resolveRoute, type Resolved } from './route-config';
import type { LockData, LockHandle } from '../../locks/lock-handle';
import { DEFAULT_MAX_HOLD } from '../../locks/lease-keeper';
import { describe, expectBoom, isPlainObject } from '../../common/validation';

/** Route-level configuration, in a route's `options.plugins.monglock`: the settings, and `filter` or `filters`. */
export type RouteLockOptions = RouteLockSettings &
  (
    | {
        /** Builds the filter of the document to lock from the request, for example `(request) => ({ _id: request.params.id })`. */
        readonly filter: (request: Request) => Document;
        readonly filters?: undefined;
      }
    | {
        /**
         * Instead of `filter`: builds the filters of several documents to lock together, all or
         * nothing (`acquireAll`: in a canonical order, never waiting while holding part of the
         * set), for example `(request) => [{ _id: request.params.from }, { _id: request.params.to }]`.
         * The handler finds the group in `lockOf(request).locks` and may return
         * `commitAll([update, …], value)`.
         */
        readonly filters: (request: Request) => readonly Document[];
        readonly filter?: undefined;
      }
  );

/** The settings of a locked route besides its `filter` or `filters`. */
export interface RouteLockSettings {
  /**
   * The lock: a writeLock or multiLock instance (made once, outside the route: hapi deep-copies
   * route options, which would break a driver `Collection` given inside lock options).
   */
  readonly lock: RouteLock;
  /** The tag: required for a multiLock (one it declares); none, or `write`, for a writeLock. */
  readonly tag?: string;
  /**
   * ms to wait for a held lock inside the request (an assertive tag waits for the tags it asserts
   * over too); then the route answers 409 and an assertive registration is released.
   * @default 0
   */
  readonly wait?: number;
  /** Lease in ms. @default the lock's */
  readonly locktimeout?: number;
  /**
   * `'hold'`: release before the answer is sent. `'checkout'`: keep the lock after the response (the
   * handler returns it; a later request releases or extends it).
   * @default 'hold'
   */
  readonly mode?: 'hold' | 'checkout';
  /**
   * Return the locked document with the lock (`lockOf(request).document`): `true` all of it, or a
   * projection. With a handler that returns `commit(update, value)`, a read-modify-write takes two
   * commands: the acquisition reads, the release writes.
   * @default undefined (the lock only)
   */
  readonly document?: true | Record<string, 0 | 1 | boolean>;
  /**
   * Ceiling on keeping the lease alive, in ms (or `Infinity`): then renewal stops, the route's
   * signal (`lockOf(request).signal`) aborts with `MaxHoldExceeded` and the lock is released.
   * @default 600000 (10 minutes)
   */
  readonly maxHold?: number;
}

/**
 * A writeLock or multiLock of this package, of any collection schema and promise library (what
 * it is, is checked when the server initializes).
 */
export interface RouteLock {
  acquire(filter: never, params: never): PromiseLike<LockData>;
}

/** Plugin options. */
export interface MonglockPluginOptions {
  /** The boom module to answer with. @default require('@hapi/boom') */
  readonly boom?: BoomLike;
}

/** What the plugin gives a handler, in `request.plugins.monglock`. */
export interface RequestLock {
  /** The held lock (its JSON is what a checkout route returns). */
  readonly lock: LockHandle<Document, undefined, Document | undefined>;
  /** `lock.guard(extra)`: a filter matching the document only while the lock is held. */
  guard(extra?: Document): Document;
  /**
   * Aborts if the lease is lost while the route runs (an extension failed, or the lease may have
   * ended by the upper bound of the server's clock): the lease is extended the way `using()`
   * extends it, each time half of it is left.
   */
  readonly signal: AbortSignal;
  /** The locked document, when the route's `document` option asked for it. */
  readonly document: Document | undefined;
  /** A route with `filters`: the group (its handles in the order of the filters; `lock` is the first). */
  readonly locks?: LockGroup<Array<LockHandle<Document, undefined, Document | undefined>>>;
}

declare module '@hapi/hapi' {
  interface PluginSpecificConfiguration {
    /** Lock a document for this route: see {@link RouteLockOptions}. */
    monglock?: RouteLockOptions;
  }
  interface PluginsStates {
    /**
     * The lock of a route with `plugins.monglock` (absent on other routes: `lockOf(request)`
     * throws there instead of returning undefined).
     */
    monglock: RequestLock;
  }
}

const NAME = 'monglock';
// The package's own manifest: three folders up from lib/integrations/hapi (sources) and dist/integrations/hapi (the build) alike.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const PACKAGE = require('../../../package.json') as { version: string };
const PLUGIN_KEYS: ReadonlyArray<keyof MonglockPluginOptions> = ['boom'];

/** The boom module to answer with: the plugin options' (validated at register), else `@hapi/boom`. */
function pluginBoom(options: unknown): BoomLike {
  if (options !== undefined && !isPlainObject(options)) throw new TypeError(`Expected the monglock plugin's options to be an object, got ${describe(options)}`);
  const unknown = Object.keys(options ?? {}).find((key) => !(PLUGIN_KEYS as string[]).includes(key));
  if (unknown !== undefined) throw new TypeError(`Unknown monglock plugin option \`${unknown}\`: expected ${PLUGIN_KEYS.join(', ')}`);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return expectBoom('the monglock plugin option `boom`', options?.boom) ?? (require('@hapi/boom') as BoomLike);
}

/**
 * The hapi plugin: locks the document a route works on before its pre methods and handler, gives
 * the handler the lock (`lockOf(request)`), and releases it before the answer goes out, once none
 * of the route's pre methods, their failAction or the handler runs any more (after hapi's server
 * timeout or a client disconnect, which answer while they go on, once the last of them ends). A
 * stream body is read under the lock, released before its end goes out. Once released, they are
 * never started. Lock errors answer 404/409/500 with the subtype as message.
 * @example
 * await server.register({ plugin: monglockPlugin });
 * server.route({ method: 'POST', path: '/orders/{id}/pay', options: {
 *   plugins: { monglock: { lock: orders, filter: (request) => ({ _id: request.params.id }), wait: 2000 } },
 *   handler: (request) => pay(request.plugins.monglock.lock) } });
 */
export const monglockPlugin: NamedPlugin<MonglockPluginOptions> = {
  name: NAME,
  version: PACKAGE.version,
  // Registered twice (by two plugins that each need it), hapi keeps the first and skips the rest.
  once: true,
  requirements: { hapi: '>=20.0.0' },
  register(server: Server, options?: MonglockPluginOptions) {
    const boom = pluginBoom(options);
    const routes = new WeakMap<object, Resolved>();
    const tracking = trackRequests(boom, (tags, data) => server.log(tags, data as object));
    const preResponse = preResponseFirst(async (request, h) => {
      const answer = await tracking.answering(request);
      // The handler's commit could not be applied: the client hears why, not the value.
      return answer ? answerWith(request, h, answer.error, boom) : h.continue;
    });

    const resolve = (route: RequestRoute): Resolved | undefined => {
      const config = (route.settings.plugins as Record<string, unknown> | undefined)?.[NAME];
      if (config === undefined) return undefined;
      let resolved = routes.get(route.settings);
      if (!resolved) {
        resolved = resolveRoute(routeName(route), config);
        routes.set(route.settings, resolved);
        tracking.coverHandler(route);
      }
      return resolved;
    };

    let initialized = false;
    server.events.on('route', (route) => {
      try {
        resolve(route);
      } catch (error) {
        // Before initialize, onPreStart reports it; after, server.route() throws it.
        if (initialized) throw error;
      }
    });
    // A misconfigured route fails server.initialize()/start(), not its first request.
    server.ext('onPreStart', () => {
      tracking.starting(); // a server started again after a stop
      for (const route of server.table()) resolve(route);
      initialized = true;
    });

    server.ext('onPreHandler', async (request: Request, h: ResponseToolkit) => {
      const resolved = resolve(request.route);
      if (!resolved) return h.continue;
      const { settings } = resolved;
      const waiting = tracking.begin(request, settings.mode === 'checkout');
      if (!waiting) return h.continue; // answered already: lock nothing
      preResponse.cover(request);
      // Its background work (an abandoned acquisition's lock released once its reply comes) is this server's, which its stop awaits.
      const held = await tracking.acquiring(request, withOrigin(server, () => (settings.filters ? acquireGroupFor(request, resolved, waiting, boom) : acquireFor(request, resolved, waiting, boom))));
      const signal = tracking.acquired(request, held, settings.maxHold ?? DEFAULT_MAX_HOLD);
      const { lock, group } = held;
      request.plugins.monglock = { lock, guard: (extra?: Document) => lock.guard(extra), signal, document: lock.document, ...(group && { locks: group }) } satisfies RequestLock;
      return h.continue;
    });

    // The last step before hapi sends the answer: the client must not have it before the lock is free.
    // Before the onPreResponse extensions of plugins registered earlier: one that takes over would
    // make hapi skip this one, and a handler's commit would never be applied.
    // Those added before the plugin without one (on the server, or a route's own) run it first (preResponse.cover).
    const earlier = Object.keys(server.registrations).filter((name) => name !== NAME);
    server.ext('onPreResponse', preResponse.ext, { before: earlier });
    server.events.on('response', (request: Request) => tracking.responded(request));
    // As the stop begins: requests waiting for their lock are answered 503 (hapi then waits for no idle connection).
    server.ext('onPreStop', () => tracking.stopping());
    // Before the application's own onPostStop (its client.close()) when registered first, or when it runs `after: 'monglock'`.
    server.ext('onPostStop', () => tracking.drain(server));
  },
};

/**
 * Makes `error` the request's answer from an onPreResponse extension. Not by returning it: hapi
 * takes a boom returned there as a takeover and skips every later onPreResponse extension (the
 * application's error formatting); set as the response (as hapi sets a thrown error, through its
 * internal `_setResponse`), later extensions see it as the boom it is. Returned when this hapi
 * has no `_setResponse`, or when it is no boom and the boom module cannot make it one.
 */
function answerWith(request: Request, h: ResponseToolkit, error: unknown, boom: BoomLike): unknown {
  const setResponse = (request as unknown as { _setResponse?: unknown })._setResponse;
  const boomify = (boom as { boomify?: unknown }).boomify;
  const isBoom = (error as { isBoom?: unknown } | null)?.isBoom === true;
  if (typeof setResponse !== 'function' || !(error instanceof Error) || (!isBoom && typeof boomify !== 'function')) return error;
  (setResponse as (response: unknown) => void).call(request, isBoom ? error : (boomify as (error: Error) => Error).call(boom, error));
  return h.continue;
}

/** Acquires the route's one lock (`filter`). */
async function acquireFor(request: Request, resolved: Resolved, signal: AbortSignal, boom: BoomLike): Promise<Held> {
  const { settings } = resolved;
  // Only the keys the route sets: a lock refuses keys it does not take (a writeLock has no `tag`).
  const params: Record<string, unknown> = { boom, signal };
  for (const key of ['tag', 'wait', 'locktimeout', 'document'] as const) if (settings[key] !== undefined) params[key] = settings[key];
  try {
    return heldLock(await resolved.lock.acquire(settings.filter!(request), params), boom);
  } catch (error) {
    if (isLockError(error, 'AssertiveLock') && error.lock) await (error.lock as LockHandle).release().catch(() => undefined);
    throw error;
  }
}

/** Acquires the route's documents together (`filters`); a refusal answers as boom, naming its filter in `data.request`. */
async function acquireGroupFor(request: Request, resolved: Resolved, signal: AbortSignal, boom: BoomLike): Promise<Held> {
  const { settings } = resolved;
  const filters = settings.filters!(request);
  if (!Array.isArray(filters) || filters.length === 0) throw boom.badImplementation(`monglock: \`filters\` of ${routeName(request.route)} returned ${describe(filters)}, not an array of filters`);
  const requests = filters.map((filter: Document) => ({ lock: settings.lock, filter, ...(settings.tag !== undefined && { tag: settings.tag }) }));
  const params = { signal, ...(settings.wait !== undefined && { wait: settings.wait }), ...(settings.locktimeout !== undefined && { locktimeout: settings.locktimeout }), ...(settings.document !== undefined && { document: settings.document }) };
  try {
    return heldGroup(await acquireGroup(requests, params), boom);
  } catch (error) {
    if (!isLockError(error) || (error as { isBoom?: unknown }).isBoom === true) throw error;
    const index = (error as { request?: number }).request;
    throw Object.assign(lockError(error.subtype, boom, { cause: error, data: { request: index } }), { request: index });
  }
}

/**
 * The lock the plugin acquired for this request, from the route's pre methods and handler.
 * @throws Error when there is none: the plugin is not registered on this server (the route then
 * runs without a lock), the route has no `plugins.monglock`, or the lock is not acquired yet.
 */
export function lockOf(request: Request): RequestLock {
  const state = (request.plugins as { monglock?: RequestLock }).monglock;
  if (state) return state;
  const route = routeName(request.route);
  if (!(request.server.registrations as Record<string, unknown>)[NAME]) {
    throw new Error(
      `monglock: the plugin is not registered on the server of ${route}, so its \`plugins.monglock\` is ignored and it runs without a lock: ` +
        "register it on that server (`await server.register({ plugin: monglockPlugin })`, from 'monglock/hapi')",
    );
  }
  if ((request.route.settings.plugins as Record<string, unknown> | undefined)?.[NAME] === undefined) throw new Error(`Route ${route} has no monglock configuration (\`options.plugins.monglock\`)`);
  throw new Error(`monglock: the lock of ${route} is not acquired yet (in onPreHandler): call lockOf(request) from the route's pre methods or handler`);
}
