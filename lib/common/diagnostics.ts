import { channel, tracingChannel, type Channel, type TracingChannel } from 'node:diagnostics_channel';
import { isLockError } from './errors';

/**
 * What a traced lock call publishes on its `monglock:<operation>` tracing channel. The fields
 * after `kind` are filled in as the call goes; by `asyncEnd` (and `error`) they are final, and
 * Node's tracing adds `result` or `error`.
 */
export interface LockCallContext {
  /** `acquire`, `release` or `extend`. */
  readonly operation: 'acquire' | 'release' | 'extend';
  /** `writeLock`, `multiLock`, `semaphore` or `resourceLocks`. */
  readonly kind: string;
  /** The locked collection, `db.collection`. */
  readonly namespace: string;
  /** The lock's tag (`write` for a writeLock), when known. */
  tag?: string;
  /** `acquired`, `released`, `extended`, or the error's subtype (`LockAlreadyTaken`, `DbError`, …), or `error` (misuse). */
  outcome?: string;
  /** Acquire: attempts sent (1 without waiting). */
  attempts?: number;
  /** ms from the call to its outcome (for an acquire, the time it waited). */
  durationMs?: number;
  /** The lock's id and fencing token, when it is known. */
  lockId?: string;
  fence?: number;
  /** Acquire: the lease's end, ms since the epoch in the server's time. */
  expiresAt?: number;
  /** Acquire by an owner (reentrant): the owner, and whether the hold was nested in one it already had. */
  owner?: string;
  nested?: boolean;
  /** Acquire of a tag with a limit (a semaphore): the permits taken. */
  permits?: number;
  /** Extend channel: a conversion (`handle.convert`) from one tag to another; `tag` is the new one once it succeeded. */
  conversion?: { readonly from: string; readonly to: string };
  /** Set by Node's tracing: what the call resolved, or why it failed. */
  result?: unknown;
  error?: unknown;
}

/** Why a held lock ended without its holder's release: published on `monglock:lease-lost`. */
export type LeaseLossCause =
  /** MongoDB refused an extension: the lock was released, expired and retaken, or its document is gone. */
  | 'refused'
  /** MongoDB could not be reached (DbError) until the lease ran out by the server's clock. */
  | 'store-outage'
  /** The lease ran out before an extension could land (a blocked event loop, a slow network). */
  | 'expired'
  /** `maxHold` passed: renewal stopped and the lock was released. */
  | 'max-hold';

/** Published on `monglock:lease-lost` when a kept lock (using(), the hapi plugin) is lost or given up. */
export interface LeaseLostEvent {
  readonly namespace: string;
  readonly tag: string;
  readonly lockId: string;
  readonly cause: LeaseLossCause;
  readonly error: unknown;
}

/** Published on `monglock:extension-failed` each time an automatic extension fails. */
export interface ExtensionFailedEvent {
  readonly namespace: string;
  readonly tag: string;
  readonly lockId: string;
  /** True for a store outage (DbError: the lock may still be held, the extension is retried); false when MongoDB refused (the lock is lost). */
  readonly storeOutage: boolean;
  /** ms of the lease this client can still rely on. */
  readonly remainingMs: number;
  readonly error: unknown;
}

/** Published on `monglock:wait` once per waiting acquire, when it first has to wait. */
export interface WaitEvent {
  readonly namespace: string;
  readonly tag: string;
  /**
   * `local`: a holder in this process wakes it on release; `stream`: the holder is elsewhere or
   * unknown, and this process's change stream on the collection wakes it (it polls meanwhile);
   * `polling`: retried with backoff only (no stream: `changeStreams: false`, or none can be had).
   */
  readonly wakeUp: 'local' | 'stream' | 'polling';
  /** Fair mode: it holds a ticket in the document's queue. */
  readonly fair: boolean;
}

/** Published on `monglock:change-feed` when a process's change stream on a collection ends (see docs/observability.md). */
export interface ChangeFeedEvent {
  readonly namespace: string;
  /** Why it ended (undefined: the server closed it, as after an invalidate). */
  readonly error: unknown;
  /** `until reopened` (in a second, while waiters wait), or `for good`: the deployment has no change streams for this client. */
  readonly polling: 'until reopened' | 'for good';
}

/** The channel names, for `diagnostics_channel.subscribe`/`tracingChannel`. */
export const CHANNELS = {
  acquire: 'monglock:acquire',
  release: 'monglock:release',
  extend: 'monglock:extend',
  leaseLost: 'monglock:lease-lost',
  extensionFailed: 'monglock:extension-failed',
  wait: 'monglock:wait',
  changeFeed: 'monglock:change-feed',
} as const;

const calls: Record<LockCallContext['operation'], TracingChannel<object, LockCallContext>> = {
  acquire: tracingChannel(CHANNELS.acquire),
  release: tracingChannel(CHANNELS.release),
  extend: tracingChannel(CHANNELS.extend),
};
const SUCCESS: Record<LockCallContext['operation'], string> = { acquire: 'acquired', release: 'released', extend: 'extended' };
const leaseLost: Channel = channel(CHANNELS.leaseLost);
const extensionFailed: Channel = channel(CHANNELS.extensionFailed);
const waits: Channel = channel(CHANNELS.wait);
const feeds: Channel = channel(CHANNELS.changeFeed);

/** True when someone listens to any part of `monglock:<operation>` (`TracingChannel.hasSubscribers` itself needs Node 20.13+). */
export function isTraced(operation: LockCallContext['operation']): boolean {
  const tracing = calls[operation];
  return tracing.start.hasSubscribers || tracing.asyncEnd.hasSubscribers || tracing.error.hasSubscribers || tracing.end.hasSubscribers || tracing.asyncStart.hasSubscribers;
}

/**
 * Runs `call`, traced on `monglock:<operation>` when someone subscribes: then `describe()` gives
 * the context, which `call` fills in and which is completed with the outcome and duration.
 * Hot paths check {@link isTraced} first and skip this (and its closures) when nobody listens.
 */
export function traced<T>(
  operation: LockCallContext['operation'],
  describe: () => LockCallContext,
  now: () => number,
  call: (context: LockCallContext | undefined) => Promise<T>,
): Promise<T> {
  const tracing = calls[operation];
  if (!isTraced(operation)) return call(undefined);
  const context = describe();
  const started = now();
  return tracing.tracePromise(async () => {
    try {
      const result = await call(context);
      context.outcome ??= SUCCESS[operation];
      return result;
    } catch (error) {
      context.outcome = isLockError(error) ? error.subtype : 'error';
      throw error;
    } finally {
      context.durationMs = now() - started;
    }
  }, context);
}

/** Publishes a lifecycle event, when someone subscribes. */
export const publish = {
  leaseLost: (event: () => LeaseLostEvent): void => {
    if (leaseLost.hasSubscribers) leaseLost.publish(event());
  },
  extensionFailed: (event: () => ExtensionFailedEvent): void => {
    if (extensionFailed.hasSubscribers) extensionFailed.publish(event());
  },
  wait: (event: () => WaitEvent): void => {
    if (waits.hasSubscribers) waits.publish(event());
  },
  feedBroke: (event: () => ChangeFeedEvent): void => {
    if (feeds.hasSubscribers) feeds.publish(event());
  },
};
