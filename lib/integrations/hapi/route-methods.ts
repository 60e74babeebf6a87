import type { Request, ResponseToolkit } from '@hapi/hapi';

/** `POST /orders/{id}`. */
export function routeName(route: { method: string; path: string }): string {
  return `${route.method.toUpperCase()} ${route.path}`;
}

/** A route method as hapi calls it: a pre method, a pre's failAction (with the error as third argument), the handler or an onPostHandler extension. */
export type RouteMethod = (this: unknown, request: Request, h: ResponseToolkit, ...rest: unknown[]) => unknown;

/** Wraps one route method (`what`: 'pre method', 'pre failAction', 'handler'; `where`: the route). */
type Wrap = (original: RouteMethod, what: string, where: string) => RouteMethod;

/**
 * Covers the `pre` methods (and function failActions) of each route once, through hapi's
 * internal `request._route._prerequisites`: returns a function telling, for a request, whether
 * its route's pre methods are wrapped by `wrap` (or it has none). When hapi's internals are not
 * as expected, nothing is wrapped and `log` warns once per route.
 */
export function prerequisiteCoverage(wrap: Wrap, log: (tags: string[], data: unknown) => void): (request: Request) => boolean {
  const coverage = new WeakMap<object, boolean>();

  /** Wraps the items hapi built from the route's `pre` (request._route._prerequisites), all or none. */
  const wrapPrerequisites = (request: Request, declared: unknown[], where: string): boolean => {
    const sets = (request as unknown as { _route?: { _prerequisites?: unknown } })._route?._prerequisites;
    if (!Array.isArray(sets) || sets.length !== declared.length) return false;
    const items: Array<{ method: RouteMethod; failAction: unknown }> = [];
    for (const [index, set] of sets.entries()) {
      const size = Array.isArray(declared[index]) ? (declared[index] as unknown[]).length : 1;
      if (!Array.isArray(set) || set.length !== size) return false;
      for (const item of set as unknown[]) {
        const failAction = (item as { failAction?: unknown } | null)?.failAction;
        if (!holdsFunction(item, 'method') || (typeof failAction === 'function' && !holdsFunction(item, 'failAction'))) return false;
        items.push(item as { method: RouteMethod; failAction: unknown });
      }
    }
    for (const item of items) {
      item.method = wrap(item.method, 'pre method', where);
      if (typeof item.failAction === 'function') item.failAction = wrap(item.failAction as RouteMethod, 'pre failAction', where);
    }
    return true;
  };

  /** True when the route's pre methods are covered (or it has none). */
  return (request: Request): boolean => {
    const declared = request.route.settings.pre as unknown;
    if (!Array.isArray(declared) || declared.length === 0) return true;
    const internal = (request as unknown as { _route?: unknown })._route;
    const key = typeof internal === 'object' && internal !== null ? internal : request.route.settings;
    let covered = coverage.get(key);
    if (covered === undefined) {
      const where = routeName(request.route);
      covered = wrapPrerequisites(request, declared, where);
      coverage.set(key, covered);
      if (!covered) {
        log(['monglock', 'warning'], `monglock: cannot follow the pre methods of ${where} in this hapi version; its lock is released only after the handler has finished (or by its lease)`);
      }
    }
    return covered;
  };
}

/** True for an object whose own writable data property `key` is a function. */
export function holdsFunction(value: unknown, key: string): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const descriptor = Object.getOwnPropertyDescriptor(value, key);
  return descriptor?.writable === true && typeof descriptor.value === 'function';
}

/** The extension functions {@link coverPostHandlers} wrapped (nodes are shared between routes). */
const followedPostHandlers = new WeakSet<object>();

/**
 * Wraps the `onPostHandler` extensions of `request`'s route with `follow` (once each: hapi's
 * internal `request._route._extensions.onPostHandler.nodes`, shared with other routes), so that one
 * still running after hapi answered early (a server timeout) is known. False when hapi's
 * internals are not as expected.
 */
export function coverPostHandlers(request: Request, follow: (original: RouteMethod) => RouteMethod): boolean {
  const route = (request as unknown as { _route?: { _extensions?: { onPostHandler?: { nodes?: unknown } } } })._route;
  const ext = route?._extensions?.onPostHandler;
  if (ext === undefined) return false;
  if (ext.nodes === null || ext.nodes === undefined) return true;
  if (!Array.isArray(ext.nodes)) return false;
  for (const node of ext.nodes as unknown[]) {
    if (!holdsFunction(node, 'func')) return false;
    const item = node as { func: RouteMethod };
    if (followedPostHandlers.has(item.func)) continue;
    item.func = follow(item.func);
    followedPostHandlers.add(item.func);
  }
  return true;
}
