import { Readable } from 'node:stream';
import type { Request, RequestRoute } from '@hapi/hapi';
import { backgroundSettled } from '../../common/background';
import type { BoomLike } from '../../common/errors';
import type { RouteCommit } from './route-commit';
import { routeGate } from './route-gate';
import { carriesLock, delivered, failedAnswer, holdsLockJson } from './answer-kind';
import { coverPostHandlers, prerequisiteCoverage, routeName, type RouteMethod } from './route-methods';
import { lapsed, rethrowOnceOut, trackedRequest, untilAborted, untilLapse, untilLeasesEnd, type Tracked } from './tracked-request';
import { leaseEnded } from '../../locks/lease-keeper';
import type { Held } from './held';
import { releasingBody, type SentResponse } from './streamed-body';
import { Acquisitions } from './acquisitions';
import { unsendable } from './transmit-check';

/** What the answer must become: the error of a handler's commit that could not be applied. */
export type Answer = { readonly error: unknown };

/** How the hapi plugin follows a request from its onPreHandler to the end of its handler. */
export interface RequestTracking {
  /**
   * Starts following `request` (onPreHandler, before acquiring) and wraps its route's pre methods
   * the first time. Resolves the signal for its wait for the lock, which aborts once hapi answers
   * without it (a server timeout, a client gone); undefined when it already has: then nothing must
   * be acquired.
   * @throws a boom 503 once the server stops ({@link stopping}): no wait starts then.
   */
  begin(request: Request, checkout: boolean): AbortSignal | undefined;
  /**
   * The acquisition of a request that {@link begin} started: followed until it settles (a stop
   * waits for it); returns it, rejected with a boom 503 when a stop ended its wait.
   */
  acquiring<T>(request: Request, acquisition: Promise<T>): Promise<T>;
  /**
   * The lock is held: its lease is kept alive until it is released (or handed over by a
   * checkout), for `maxHoldMs` at most; resolves the signal that aborts if the lease is lost
   * meanwhile (or maxHold passes: the lock is then released).
   */
  acquired(request: Request, held: Held, maxHoldMs: number): AbortSignal;
  /**
   * hapi has settled on the answer and is about to send it (onPreResponse): resolves once the
   * lock is released if no route code runs any more, so the client cannot have the answer before
   * the lock is free. A stream body is read under the lock and releases it before the last byte
   * its client gets goes out; while route code still runs (a server timeout), it resolves at
   * once and that code's end releases, except for a refusal by that route code itself (a pre
   * method of a parallel set), held back until the rest of it ends (maxHold at the latest). A
   * handler's commit is applied here, once the answer is settled, is no failure (onPostHandler
   * extensions and response validation ran under the lock) and hapi can send it; its error, if
   * it was not applied, is resolved to answer instead, as is a checkout's whose lock is no longer live.
   */
  answering(request: Request): Promise<Answer | undefined>;
  /** The response has gone out, or the client is gone (the server's `response` event). */
  responded(request: Request): void;
  /** Wraps a locked route's handler (once per route: hapi reads `route.settings.handler` on each request). */
  coverHandler(route: RequestRoute): void;
  /**
   * The server begins to stop (onPreStop): ends the waits of requests still acquiring their lock
   * (answered 503, so that hapi's stop is not left waiting for them) and refuses any wait that
   * would start from now on.
   */
  stopping(): void;
  /** The server starts (again, after a stop): waits for a lock are allowed. */
  starting(): void;
  /**
   * The server stopped (onPostStop): ends the waits of requests still acquiring, aborts the signal
   * of route code still running under a lock (no longer extended; a commit on its way is
   * finished), and resolves once every request is done with its lock (released, committed, handed
   * over) or its leases have ended, and once the locks abandoned acquisitions took are released.
   */
  drain(origin?: object): Promise<void>;
}

/**
 * Follows locked requests so that the lock is released once the answer is settled and none of
 * the route's code after onPreHandler runs any more (before the answer is sent, when that code is
 * done first), and so that none of it starts once released.
 *
 * hapi runs the pre methods and the handler as one lifecycle step; a server timeout or a client
 * disconnect answers while that step (or an onPostHandler extension) goes on. So every pre method,
 * function failAction, the handler and the onPostHandler extensions are wrapped and counted.
 */
export function trackRequests(boom: BoomLike, log: (tags: string[], data: unknown) => void): RequestTracking {
  const requests = new WeakMap<Request, Tracked>();
  /** Requests that hold a lock they are not done with. */
  const live = new Set<Tracked>();
  const acquisitions = new Acquisitions(boom);
  const finish = (state: Tracked): void => {
    live.delete(state);
    state.finish();
  };
  let warnedPostHandlers = false;
  /**
   * Stops keeping the leases: an extension on its way is waited for, but not once a lease is lost
   * or lapses (within the keeper's safety margin of its end, which a stopped keeper no longer
   * reports: {@link lapsed} tells it then).
   */
  const stopKeeping = (state: Tracked): Promise<void> => Promise.race([Promise.resolve(state.keeping?.stop()), untilAborted(state.controller.signal), untilLapse(state)]);

  const releasable = (state: Tracked): boolean =>
    state.held !== undefined && !state.handedOver && !state.released && !state.committing && state.answered && !state.streaming && state.running === 0 && (!state.conservative || state.handlerFinished);

  /** Releases the lock if nothing needs it any more; resolves once it is released (or kept). Never rejects. */
  const settle = async (state: Tracked): Promise<void> => {
    if (!releasable(state)) return state.releasing;
    if (!state.handlerFinished) {
      // hapi starts the next pre method or the handler a few microtasks after the previous one
      // settled; one macrotask later, a call that started meanwhile shows in `started` (its end settles again).
      const seen = state.started;
      await new Promise((resolve) => setImmediate(resolve));
      if (state.started !== seen || !releasable(state)) return state.releasing;
    }
    state.released = true;
    const held = state.held;
    state.releasing = (async () => {
      await stopKeeping(state);
      await held?.release();
    })()
      .catch((error: unknown) => log(['monglock', 'error'], error))
      .finally(() => finish(state));
    return state.releasing;
  };

  /**
   * Applies the handler's commit with the release (onPreResponse, the answer settled and no
   * failure): rejects when it was not applied (the lease was lost, the document no longer matches),
   * and settle() then releases without it. Once its first write went out, a group's is finished.
   */
  const commitNow = async (state: Tracked, asked: RouteCommit): Promise<void> => {
    state.committing = true;
    let sent = false;
    // Right before each write: the lease was lost or maxHold released the lock (not checked once a group's first write went out).
    const refuseIfLost = (): void => {
      if (!sent && state.controller.signal.aborted) throw state.controller.signal.reason;
      sent = true;
    };
    try {
      await stopKeeping(state);
      // As the keeper would have: a lease that may end within its safety margin takes no commit.
      if (lapsed(state)) throw leaseEnded('expired', undefined, boom);
      await state.held!.commit(asked.request, refuseIfLost);
      state.released = true;
      finish(state);
    } finally {
      state.committing = false;
    }
  };

  /**
   * A checkout's answer carries the lock's JSON: the keeper stops (neither it nor maxHold releases
   * the lock once handed out), and the lock must be live, its lease above the keeper's margin.
   * Resolves the error to answer instead when it is not: the one a commit gets in the same case.
   */
  const handOut = async (state: Tracked, request: Request): Promise<Answer | undefined> => {
    // hapi would answer its own 500 once the lock is handed out (a header, a cookie it cannot write): refused and released first.
    const notSent = await unsendable(request);
    if (notSent !== undefined) return { error: boom.badImplementation(`monglock: not handing out the lock: hapi could not send the answer (${notSent})`) };
    if (!state.released && !state.controller.signal.aborted) await stopKeeping(state);
    if (!state.released && !state.controller.signal.aborted && !lapsed(state)) return undefined;
    const reason: unknown = state.controller.signal.reason;
    return { error: reason ?? (state.released ? boom.badImplementation('monglock: not handing out the lock: it was released') : leaseEnded('expired', undefined, boom)) };
  };

  const { wrap, followed } = routeGate({
    boom,
    stateOf: (request) => requests.get(request),
    settle,
    async answeredAround(state, response) {
      state.answered = true;
      // An onPostHandler extension's h.close after the handler's commit: applied before the close goes out, as for a 204; hapi sends a bodiless 200, a 500 when it is not applied.
      const commit = state.commit;
      state.commit = undefined;
      if (commit && (state.released || state.controller.signal.aborted || (await commitNow(state, commit).then(() => false, () => true)))) response.statusCode = 500;
      await settle(state);
      await state.ended; // route code still running (a parallel pre method) releases once it ends; maxHold at the latest
    },
  });
  const coverPrerequisites = prerequisiteCoverage(wrap, log);

  return {
    begin(request, checkout) {
      if (request.info.completed) return undefined;
      acquisitions.refuseWhileStopping();
      const postHandlersFollowed = coverPostHandlers(request, followed);
      if (!postHandlersFollowed && !warnedPostHandlers) {
        warnedPostHandlers = true;
        log(['monglock', 'warning'], "monglock: cannot follow onPostHandler extensions in this hapi version; a route's lock is released only after its handler has finished (or by its lease)");
      }
      const state = trackedRequest(checkout, !coverPrerequisites(request) || !postHandlersFollowed);
      requests.set(request, state);
      return state.waiting.signal;
    },
    acquiring(request, acquisition) {
      return acquisitions.follow(acquisition, requests.get(request)?.waiting).catch((error: unknown) => rethrowOnceOut(request, requests.get(request), error));
    },
    acquired(request, held, maxHoldMs) {
      const state = requests.get(request);
      const controller = state?.controller ?? new AbortController();
      if (!state) return controller.signal;
      state.held = held;
      // maxHold: the keeper releases the lock(s); from then on the route is done with them (the gate refuses to start its code).
      live.add(state);
      state.keeping = held.keep(controller, maxHoldMs, (releasing) => {
        state.released = true;
        // An answer settled from now on goes out once this release is done, as one settle() releases for.
        state.releasing = releasing.then(() => undefined).finally(() => finish(state));
      });
      void settle(state); // hapi may have answered while we waited for the lock
      return controller.signal;
    },
    async answering(request) {
      const state = requests.get(request);
      if (!state) return undefined;
      const response = request.response as (SentResponse & { isBoom?: boolean; variety?: string; source?: unknown }) | null;
      const commit = state.commit;
      state.commit = undefined;
      // The handler's answer, as settled (hapi's server timer no longer runs): the commit goes with
      // the release, unless the lock was lost or given up (maxHold) after the handler returned.
      if (commit && !failedAnswer(request)) {
        state.answered = true;
        const notSent = await unsendable(request); // hapi would fail to send it once the commit is applied: nothing is
        const failure =
          state.released || state.controller.signal.aborted
            ? { error: state.controller.signal.reason ?? boom.badImplementation('monglock: not committing: the lock was released') }
            : notSent !== undefined
              ? { error: boom.badImplementation(`monglock: not committing: hapi could not send the answer (${notSent}); nothing was written`) }
              : await commitNow(state, commit).then(
                () => undefined,
                (error: unknown) => ({ error }),
              );
        await settle(state); // not applied: released without it, before the answer
        return failure;
      }
      if (state.checkout && carriesLock(request) && state.held) {
        const refusal = await handOut(state, request);
        if (!refusal) return undefined; // its answer carries a live lock: responded() decides whether it went out
        state.answered = true;
        await settle(state); // released before the refusal goes out (maxHold's release too)
        if (state.released) await state.ended;
        return refusal;
      }
      state.answered = true;
      if (!state.held) {
        // Ended with hapi's own answer when it is an error (its server timeout's 503): the wait's end then leaves it the request's response, not a 500.
        state.waiting.abort(response?.isBoom === true ? response : new Error('monglock: hapi answered while the request waited for its lock'));
        return undefined;
      }
      const sendsBody = response?.isBoom !== true && request.method !== 'head';
      if (sendsBody && response?.variety === 'stream' && response.source instanceof Readable && !state.released) {
        state.streaming = true;
        const release = (): Promise<void> => {
          state.streaming = false;
          return settle(state);
        };
        // Read by hapi as it sends the response: it reads the source set here.
        response.source = releasingBody(response.source, release, response);
        return undefined;
      }
      await settle(state);
      // A refusal by route code while more of it runs (a parallel pre method): held back until that ends, or maxHold releases.
      if (!state.released && state.running > 0 && response !== null && state.refusals.has(response)) await state.ended;
      return undefined;
    },
    responded(request) {
      const state = requests.get(request);
      if (!state) return;
      state.responded();
      if (!state.held) state.waiting.abort(new Error('monglock: the response went out while the request waited for its lock'));
      if (state.checkout && state.held && holdsLockJson(request, state.held.lock.id, state.handlerFinished) && delivered(request)) {
        state.handedOver = true; // the client has the lock's JSON: it releases or extends it
        void Promise.resolve(state.keeping?.stop()).finally(() => finish(state));
      }
      state.answered = true;
      state.streaming = false; // a stream body hapi did not read to its end: nothing reads it any more
      void settle(state);
    },
    coverHandler(route) {
      const settings = route.settings as { handler?: unknown };
      if (typeof settings.handler === 'function') settings.handler = wrap(settings.handler as RouteMethod, 'handler', routeName(route));
    },
    starting: () => acquisitions.starting(),
    stopping: () => acquisitions.stopping(),
    async drain(origin) {
      // Requests still waiting for their lock (a stop without onPreStop) stop waiting: each acquisition ends, abandoned or holding its lock (then followed below).
      await acquisitions.settled();
      const waits = [...live].map(async (state) => {
        // A commit on its way is finished; other route code is told to stop, and its lock is no longer extended.
        if (!state.committing && !state.controller.signal.aborted) {
          state.controller.abort(new DOMException('monglock: the server stopped; the lock is no longer extended', 'AbortError'));
          await state.keeping?.stop();
        }
        // Route code that ignores its signal: its locks end with their leases.
        await Promise.race([state.ended, untilLeasesEnd(state)]);
      });
      await Promise.all(waits);
      // Locks that abandoned acquisitions (a request answered while it waited) took once their replies came.
      await backgroundSettled(origin);
    },
  };
}
