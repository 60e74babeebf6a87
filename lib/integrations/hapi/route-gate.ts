import type { Request } from '@hapi/hapi';
import type { BoomLike } from '../../common/errors';
import { routeCommitOf, type JsonReplacer } from './route-commit';
import type { RouteMethod } from './route-methods';
import type { Tracked } from './tracked-request';

/** What the gate needs of the plugin's request tracking. */
export interface GateContext {
  readonly boom: BoomLike;
  /** The request's state, once the plugin follows it. */
  stateOf(request: Request): Tracked | undefined;
  /** Releases the lock if nothing needs it any more (never rejects). */
  settle(state: Tracked): Promise<void>;
  /**
   * Route code answered by itself, without onPreResponse (`h.close`): resolves once the request
   * is done with its lock, so that the answer goes out after the release. `response` is the raw
   * response hapi is about to end (its status may still be set).
   */
  answeredAround(state: Tracked, response: { statusCode: number }): Promise<void>;
}

/** Wraps the route's code so that none of it runs without the lock and each call is counted. */
export interface RouteGate {
  /** A pre method, a function failAction or the handler (`what`) of route `where`. */
  wrap(original: RouteMethod, what: string, where: string): RouteMethod;
  /** An onPostHandler extension: counted while it runs for a locked request (after a server timeout, its end releases). */
  followed(original: RouteMethod): RouteMethod;
}

/** hapi's `h.close`: the response is ended without onPreResponse. */
function closes(result: unknown, h: unknown): boolean {
  return typeof result === 'symbol' && result === (h as { close?: unknown } | undefined)?.close;
}

/** The gate of {@link RouteGate} over `context`. */
export function routeGate(context: GateContext): RouteGate {
  const { boom, stateOf, settle } = context;

  /** Runs `call` counted as route code of `state`; `h.close` resolves once the lock is released. */
  const counted = async (state: Tracked, request: Request, h: unknown, call: () => Promise<unknown>, onEnd?: () => void): Promise<unknown> => {
    let result: unknown;
    state.running++;
    try {
      result = await call();
    } catch (error) {
      if (typeof error === 'object' && error !== null) state.refusals.add(error);
      throw error;
    } finally {
      state.running--;
      onEnd?.();
      void settle(state); // hapi answered already (a server timeout, a client gone): this call may have been the last
    }
    if (closes(result, h)) await context.answeredAround(state, request.raw.res);
    else if ((result as { isBoom?: unknown } | null)?.isBoom === true) state.refusals.add(result as object);
    return result;
  };

  const followed = (original: RouteMethod): RouteMethod =>
    async function (this: unknown, request, h, ...rest) {
      const state = stateOf(request);
      if (!state?.held || state.released) return original.call(this, request, h, ...rest);
      return counted(state, request, h, async () => original.call(this, request, h, ...rest));
    };

  const wrap = (original: RouteMethod, what: string, where: string): RouteMethod => {
    const guarded: RouteMethod = async function (this: unknown, request, h, ...rest) {
      const state = stateOf(request);
      // Never started without the lock: not before it is held, nor once it is released, lost or given up (maxHold).
      if (!state?.held || state.released || state.controller.signal.aborted) {
        const why = !state?.held ? 'not held' : state.released ? 'released' : 'lost or given up (maxHold)';
        throw boom.badImplementation(`monglock: not running the ${what} of ${where}: its lock is ${why}`);
      }
      state.started++;
      const call = async (): Promise<unknown> => {
        const result: unknown = await original.call(this, request, h, ...rest);
        const asked = what === 'handler' ? routeCommitOf(result, boom, (request.route.settings.json as { replacer?: JsonReplacer } | undefined)?.replacer) : undefined;
        if (!asked) return result;
        // hapi answered already (a server timeout, a client gone): the client may retry, so nothing is applied.
        if (state.answered) throw boom.badImplementation('monglock: not committing: hapi already answered the request');
        // The lease was lost, or maxHold released the lock, while the handler ran: its error is the answer.
        if (state.controller.signal.aborted) throw state.controller.signal.reason;
        state.commit = asked; // applied by answering(), once the answer is settled
        return asked.answer(asked.request.value);
      };
      const finished = what === 'handler' ? () => void (state.handlerFinished = true) : undefined;
      return counted(state, request, h, call, finished);
    };
    // hapi names the method in some of its errors.
    return Object.defineProperty(guarded, 'name', { value: original.name });
  };

  return { wrap, followed };
}
