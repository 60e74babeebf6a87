import type { Request } from '@hapi/hapi';
import type { Held } from './held';
import { Handle } from '../../locks/lock-handle';
import { safetyMargin } from '../../locks/lease-keeper';
import type { RouteCommit } from './route-commit';

/** One request of a locked route. */
export interface Tracked {
  /** The lock, or the group of locks, once acquired. */
  held?: Held;
  /** `mode: 'checkout'`: the lock outlives the request, once its handler answered successfully. */
  readonly checkout: boolean;
  /** A checkout whose lock reached the client: it is the client's to release. */
  handedOver: boolean;
  /** Keeps the leases alive while the route runs (aborts `controller` when one is lost); `stop()` ends that. */
  keeping?: { stop(): Promise<void> };
  readonly controller: AbortController;
  /** Aborts a wait for the lock once nobody awaits the answer any more. */
  readonly waiting: AbortController;
  /** The route's pre methods or onPostHandler extensions could not be wrapped: release only after the handler has finished. */
  readonly conservative: boolean;
  /** Wrapped calls (pre methods, failActions, the handler, onPostHandler extensions) in progress. */
  running: number;
  /** Wrapped calls started so far. */
  started: number;
  /** What wrapped calls threw or returned as a failure (a boom): hapi may answer it while other route code still runs. */
  readonly refusals: WeakSet<object>;
  handlerFinished: boolean;
  /**
   * hapi has settled on an answer that does not carry the lock (a checkout's successful answer
   * does, until it went out): from then on, the lock is released once no route code runs.
   */
  answered: boolean;
  /** A stream body is read under the lock: the last byte its client gets (or its end, or the response event) releases it. */
  streaming: boolean;
  /** Once set, no wrapped call runs its user function. */
  released: boolean;
  /** The release under way, for an answer that must not go out before it is done. */
  releasing?: Promise<void>;
  /** The handler's commit, applied with the release once hapi settled on the answer (onPreResponse). */
  commit?: RouteCommit;
  /** The commit's writes are on their way: nothing else releases, and a stop does not interrupt them. */
  committing: boolean;
  /** Resolves once the request is done with its lock: released, committed or handed over (`finish`). */
  readonly ended: Promise<void>;
  readonly finish: () => void;
  /** Resolves once hapi is done with the request (the server's `response` event: `request.info.completed` is set). */
  readonly out: Promise<void>;
  readonly responded: () => void;
}

/** A request that starts to be followed (before its acquisition): `conservative` when its route code cannot all be followed. */
export function trackedRequest(checkout: boolean, conservative: boolean): Tracked {
  return {
    checkout,
    handedOver: false,
    controller: new AbortController(),
    waiting: new AbortController(),
    conservative,
    running: 0,
    started: 0,
    refusals: new WeakSet(),
    handlerFinished: false,
    answered: false,
    streaming: false,
    released: false,
    committing: false,
    ...ending(),
    ...responding(),
  };
}

/**
 * Rethrows `error`, the end of `state`'s wait for its lock, from the route's onPreHandler step;
 * when hapi answered while the request waited (its server timeout), only once the response is out:
 * until then hapi sets what a lifecycle step throws as the request's response, over (and closing)
 * the Response it is sending; thrown after, hapi leaves its own answer as it sent it.
 */
export async function rethrowOnceOut(request: Request, state: Tracked | undefined, error: unknown): Promise<never> {
  if (state?.answered && !request.info.completed) await state.out;
  throw error;
}

/** When hapi is done with a request: `out` resolves once `responded` is called. */
function responding(): Pick<Tracked, 'out' | 'responded'> {
  let responded!: () => void;
  const out = new Promise<void>((resolve) => (responded = resolve));
  return { out, responded };
}

/** How a request ends with its lock: `ended` resolves once `finish` is called. */
function ending(): Pick<Tracked, 'ended' | 'finish'> {
  let finish!: () => void;
  const ended = new Promise<void>((resolve) => (finish = resolve));
  return { ended, finish };
}

/** The handles `state` holds: its lock, or its group's. */
function handlesOf(state: Tracked): Handle[] {
  return state.held ? [...(state.held.group ?? [state.held.lock])] : [];
}

/** ms until the lease of `handle` lapses: the keeper's safety margin before its end, by the upper bound of the server's clock. */
function untilLapseOf(handle: Handle): number {
  return handle.remaining() - safetyMargin(Handle.lease(handle));
}

/** True once a lease `state` holds has lapsed (see {@link untilLapseOf}). */
export function lapsed(state: Tracked): boolean {
  return handlesOf(state).some((handle) => untilLapseOf(handle) <= 0);
}

/** Resolves once a lease `state` holds lapses, without keeping the process alive. */
export function untilLapse(state: Tracked): Promise<void> {
  return afterUnref(Math.min(...handlesOf(state).map(untilLapseOf)));
}

/** Resolves once every lease `state` holds has ended (by the upper bound of the server's clock), without keeping the process alive. */
export function untilLeasesEnd(state: Tracked): Promise<void> {
  return afterUnref(Math.max(0, ...handlesOf(state).map((handle) => handle.remaining())));
}

/** Resolves after `ms` (at once for a negative count; at most a timer's longest delay), without keeping the process alive. */
function afterUnref(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(Math.max(0, ms || 0), 2 ** 31 - 1)).unref());
}

/** Resolves once `signal` aborts (at once if it has). */
export function untilAborted(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}
