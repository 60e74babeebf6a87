import { isLockError } from '../common/errors';
import { knownKeys } from '../common/known-keys';
import { CALL_KEYS, readParams, type CallOptions } from '../common/options';
import type { Handle, LockHandle } from '../locks/lock-handle';
import type { Located } from './group-request';

/** A held member of a group: its handle, and the request it answers. */
export interface HeldMember {
  readonly handle: Handle;
  readonly member: Located;
}

/** What a group offers besides its handles (which it is an array of, in the order of the requests). */
export interface LockGroupMethods {
  /** 128 random bits, hex: the group's id; each commit of its `commitAll` records it (`lock.committed[].group`). */
  readonly id: string;
  /** The earliest lease end of its members, ms since the epoch by the server's clock. */
  readonly expiresAt: number;
  /** ms of the shortest lease left, by the upper bound of the server's clock (0 once one may have ended). */
  remaining(): number;
  /**
   * Releases every member at once. Rejects, once all were tried, with the first failure (in the
   * order of the requests), which names its request (`err.request`).
   */
  release(params?: CallOptions): Promise<void>;
  /**
   * Pushes every member's lease to `locktimeout` ms (default: each lock's lease) from the server's
   * now, all at once. Rejects with the first failure (`err.request`) when a member was lost.
   */
  extend(locktimeout?: number, params?: CallOptions): Promise<this>;
}

/** What a group's `release()` and `extend()` take: call options only, checked before any member is written. */
const GROUP_CALL = knownKeys<CallOptions>()(CALL_KEYS, {
  update: 'a group applies one update per document: return `commitAll([update, …])` from `usingAll()`, or release each handle with its own update',
});

/**
 * The handles `acquireAll` resolves, in the order of its requests (`const [from, to] = await
 * acquireAll(…)`), with `release()`, `extend()` and `remaining()` for the whole set; each handle
 * keeps its own `guard()`, `fence` and `document`. Its JSON is the array of the handles' JSON.
 */
export type LockGroup<H extends readonly LockHandle[] = LockHandle[]> = H & LockGroupMethods;

/** The class behind every {@link LockGroup}. */
export class HandleGroup extends Array<Handle> implements LockGroupMethods {
  /** `map`, `filter` and `slice` of a group are plain arrays. */
  static override get [Symbol.species](): ArrayConstructor {
    return Array;
  }

  readonly #canonical: readonly HeldMember[];

  /**
   * @param id the group's id
   * @param held the members, in canonical order (the order in which commits are applied)
   */
  constructor(
    readonly id: string,
    held: readonly HeldMember[],
  ) {
    super();
    this.#canonical = held;
    const byRequest = [...held].sort((a, b) => a.member.index - b.member.index);
    for (const { handle } of byRequest) this.push(handle);
  }

  /** The members in canonical order. @internal */
  static members(group: HandleGroup): readonly HeldMember[] {
    return group.#canonical;
  }

  get expiresAt(): number {
    return Math.min(...this.map((handle) => handle.expiresAt));
  }

  remaining(): number {
    return Math.min(...this.map((handle) => handle.remaining()));
  }

  async release(params?: CallOptions): Promise<void> {
    const p = readParams('params', params, GROUP_CALL);
    await settleAll(this.#canonical, ({ handle }) => handle.release(p));
  }

  async extend(locktimeout?: number, params?: CallOptions): Promise<this> {
    const p = readParams('params', params, GROUP_CALL);
    await settleAll(this.#canonical, ({ handle }) => handle.extend(locktimeout, p));
    return this;
  }
}

/**
 * Runs `call` on every member at once; once all settled, rejects with the failure of the first
 * request (by its index) that failed, but those `ignore` accepts, named by {@link ofRequest}.
 */
export async function settleAll(held: readonly HeldMember[], call: (held: HeldMember) => Promise<unknown>, ignore: (error: unknown) => boolean = () => false): Promise<void> {
  const outcomes = await Promise.allSettled(held.map(call));
  const failed = outcomes
    .map((outcome, i) => ({ outcome, index: held[i]!.member.index, namespace: held[i]!.member.core.namespace }))
    .filter((entry) => entry.outcome.status === 'rejected' && !ignore(entry.outcome.reason))
    .sort((a, b) => a.index - b.index);
  const first = failed[0];
  if (first) throw ofRequest((first.outcome as PromiseRejectedResult).reason, first.index, first.namespace);
}

/**
 * `error` (a member's failure) naming the request it answers: `err.request` is its index in
 * `requests`, and a {@link LockError}'s message starts with it (a boom error's message stays its
 * subtype). Anything but a lock error (an abort's reason, a TypeError) is left as it is.
 */
export function ofRequest<E>(error: E, index: number, namespace: string): E {
  if (!isLockError(error) || (error as { request?: unknown }).request !== undefined) return error;
  Object.defineProperty(error, 'request', { value: index, enumerable: true, writable: true, configurable: true });
  if (error.name === 'LockError') error.message = `requests[${index}] (${namespace}): ${error.message}`;
  return error;
}

/** `value instanceof LockGroup` is true for what `acquireAll` resolves. */
export const LockGroup: {
  readonly prototype: LockGroupMethods;
  [Symbol.hasInstance](value: unknown): value is LockGroup;
} = HandleGroup as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])
