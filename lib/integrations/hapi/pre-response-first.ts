import type { Request, ResponseToolkit } from '@hapi/hapi';
import { holdsFunction, type RouteMethod } from './route-methods';

/** monglock's onPreResponse step, run once per request, and what keeps it first on a locked request's route. */
export interface PreResponseFirst {
  /** The extension to register: runs `step` (once per request). */
  readonly ext: (request: Request, h: ResponseToolkit) => Promise<unknown>;
  /**
   * Makes the onPreResponse extensions that hapi sorts ahead of {@link ext} on `request`'s route
   * run `step` first (once each: hapi's internal `request._route._extensions.onPreResponse.nodes`,
   * shared between routes). Does nothing when hapi's internals are not as expected.
   */
  cover(request: Request): void;
}

/**
 * monglock's onPreResponse step must run before any other onPreResponse extension: one that runs
 * first and takes over (or throws) makes hapi skip it, so a handler's commit is never applied and
 * the lock is released only once the answer went out. Its extension sorts ahead of those of the
 * plugins registered before it (`before`), but not ahead of an extension added on the server
 * before the plugin was registered, nor of a route's own on a route added before it (they belong
 * to no plugin `before` could name): those run `step` first.
 */
export function preResponseFirst(step: (request: Request, h: ResponseToolkit) => Promise<unknown>): PreResponseFirst {
  const results = new WeakMap<Request, Promise<unknown>>();
  const once = (request: Request, h: ResponseToolkit): Promise<unknown> => {
    let result = results.get(request);
    if (!result) results.set(request, (result = step(request, h)));
    return result;
  };
  const wrapped = new WeakSet<object>();
  const ext = (request: Request, h: ResponseToolkit): Promise<unknown> => once(request, h);

  const cover = (request: Request): void => {
    const route = (request as unknown as { _route?: { _extensions?: { onPreResponse?: { nodes?: unknown } } } })._route;
    const nodes = route?._extensions?.onPreResponse?.nodes;
    if (!Array.isArray(nodes)) return;
    const own = nodes.findIndex((node: unknown) => (node as { func?: unknown } | null)?.func === ext);
    for (const node of nodes.slice(0, Math.max(0, own)) as unknown[]) {
      if (!holdsFunction(node, 'func')) continue;
      const item = node as { func: RouteMethod };
      if (wrapped.has(item.func)) continue;
      const original = item.func;
      item.func = async function (this: unknown, request, h, ...rest) {
        const result = await once(request, h);
        if (result !== h.continue) return result; // monglock's answer, returned (a hapi without _setResponse)
        return original.call(this, request, h, ...rest);
      };
      wrapped.add(item.func);
    }
  };
  return { ext, cover };
}
