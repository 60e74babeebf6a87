/**
 * Real hapi servers for the plugin's specs: made with the monglock plugin registered, on a free
 * port of 127.0.0.1, and stopped by `stopServers()` (an afterEach) whatever the test did.
 */
import { request as httpRequest } from 'node:http';
import Hapi from '@hapi/hapi';
import type { Collection, Document } from 'mongodb';
import { commit } from '../../lib';
import { monglockPlugin, type RouteLock, type RouteLockSettings } from '../../lib/hapi';
import { delayedCollection } from '../../stress/delayed-collection';

const servers: Hapi.Server[] = [];

/** A server with the plugin registered; `setup` adds its routes. Stopped by {@link stopServers}. */
export async function makeServer(setup: (server: Hapi.Server) => void): Promise<Hapi.Server> {
  const server = Hapi.server({ host: '127.0.0.1', port: 0, debug: false });
  await server.register({ plugin: monglockPlugin });
  setup(server);
  servers.push(server);
  return server;
}

/** Stops every server {@link makeServer} made (an afterEach). */
export async function stopServers(): Promise<void> {
  await Promise.all(servers.splice(0).map((server) => server.stop({ timeout: 1_000 })));
}

/** Ids of the unexpired entries of `tag` in document `id`: the lock's stored state. */
export async function heldIds(collection: Collection<Document>, id: unknown, tag = 'write'): Promise<string[]> {
  const doc = await collection.findOne({ _id: id as never });
  return ((doc?.lock?.tags?.[tag] ?? []) as Array<{ id: string; exp: Date }>).filter((e) => e.exp.getTime() > Date.now()).map((e) => e.id);
}

/**
 * Resolves once document `id` holds no live `tag` entry; fails after `ms` (well below a 5 s lease,
 * so only a release explains it). A route's lock is released after its response went out, so a
 * test that goes on with the same document waits for this first.
 */
export async function released(collection: Collection<Document>, id: unknown, ms = 2_000, tag = 'write'): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await heldIds(collection, id, tag)).length > 0) {
    if (Date.now() > deadline) throw new Error(`document ${String(id)} is still locked (${tag}) after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * A real HTTP request; resolves the status, or 0 when `abortAfter` ms cut it short. On Node 20
 * hapi answers a disconnect at once only for a request whose body it has not read (a GET): for a
 * POST it notices only when it sends the response.
 */
export function send(port: number, method: string, path: string, abortAfter?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => (abortAfter !== undefined ? resolve(0) : reject(error)));
    if (abortAfter !== undefined) setTimeout(() => req.destroy(), abortAfter);
    req.end();
  });
}

/** Resolves with the status hapi answered `path` with, once the response is out (the `response` server event). */
export function responseOf(server: Hapi.Server, path: string): Promise<number> {
  return new Promise((resolve) => {
    const listener = (request: Hapi.Request): void => {
      if (request.path !== path) return;
      server.events.removeListener('response', listener);
      const response = request.response as { statusCode?: number; output?: { statusCode: number } } | null;
      resolve(response?.output?.statusCode ?? response?.statusCode ?? 0);
    };
    server.events.on('response', listener);
  });
}

/** The route options of {@link debitRoute} besides its lock: `handler`, the lock settings `monglock`, and any other hapi route option. */
export type DebitRouteOptions = Omit<Hapi.RouteOptions, 'plugins' | 'handler'> & {
  readonly handler?: Hapi.Lifecycle.Method;
  readonly monglock?: Omit<RouteLockSettings, 'lock'>;
};

/** What a debit route answers by default: 30 off the balance, with the release, answered `{ debited: 30 }`. */
export const debit30: Hapi.Lifecycle.Method = () => commit({ $inc: { balance: -30 } }, { debited: 30 });

/** `POST /accounts/{id}/debit`, the document `{ _id: id }` locked by `lock`, answered by `handler` ({@link debit30} by default). */
export function debitRoute(lock: RouteLock, { handler = debit30, monglock = {}, ...options }: DebitRouteOptions = {}): Hapi.ServerRoute {
  return {
    method: 'POST',
    path: '/accounts/{id}/debit',
    options: { ...options, plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), ...monglock } }, handler },
  };
}

/**
 * `collection` whose lock writes after the acquisition (a release, a commit) are held back until
 * `answered()` is called (the client has its answer) or `ms` passed: `order` records when a
 * release landed and, from the test, when the client had the answer, so a release that waited
 * for the answer shows as landing after it.
 */
export function releaseAfterAnswer(collection: Collection<Document>, ms = 1_000): { collection: Collection<Document>; order: string[]; answered: () => void } {
  const order: string[] = [];
  let open!: () => void;
  const gate = Promise.race([new Promise<void>((resolve) => (open = resolve)), new Promise((resolve) => setTimeout(resolve, ms))]);
  const acquisition = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && (args[1] as Document | undefined)?.$inc?.['lock.fence'] === 1;
  const slow = delayedCollection(collection, {
    request: (method, _n, args) => (acquisition(method, args) ? undefined : gate),
    reply: (method, _n, args) => {
      if (!acquisition(method, args)) order.push('the release landed');
      return undefined;
    },
  });
  return {
    collection: slow,
    order,
    answered: () => {
      order.push('the client had the answer');
      open();
    },
  };
}
