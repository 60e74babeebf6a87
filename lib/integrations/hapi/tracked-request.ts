import type { Held } from './held';
import type { RouteCommit } from './route-commit';
import { ending } from './request-end';

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
    handlerFinished: false,
    answered: false,
    streaming: false,
    released: false,
    committing: false,
    ...ending(),
  };
}
