import { isLockError, lockError, withDbErrors } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { Cancellation } from '../common/promise-library';
import { lockWrittenBy, type Acquired } from '../engine/acquired';
import type { AcquireExtras } from '../engine/lock-engine';
import { Acquisition } from '../locks/acquisition';
import type { HandleOwner } from '../locks/lock-handle';
import type { LockDetails } from './params';
import { expectLimit, expectLockId, expectResource } from './params';
import { expectMinHold } from '../common/min-hold-params';
import { MAX_MS } from '../common/validation';
import { acquisitionExtra, createResourceOperation, gcDateOf, sharedConditions, sharedRefusal } from '../protocol/resource-document';
import { linkSignals, readWaitParams, retryWithin } from '../waiting/wait-options';
import { ResourceHandle, type ResourceLockType } from './handle';
import type { ResourceSite } from './groups';
import type { KnownResources } from './known-resources';

/** How many times one attempt re-creates a resource document that was purged under it (with `wait`, further attempts create it again). */
const CREATE_ROUNDS = 3;

/** What an xlock/slock call needs from the resource-lock client. */
export interface ResourceAcquireSite extends ResourceSite, HandleOwner {
  /** ms after its last lease ends that an abandoned resource document may be deleted. */
  readonly gcAfter: number;
  /** Resources this client has seen exist (the last it used): locked directly, without the creating upsert. */
  readonly known: KnownResources;
  readParams(params: unknown): { p: Record<string, unknown>; call: ResolvedCallOptions; details: LockDetails };
  warnUncancellable(wait: number): void;
  releaseWritten(written: Acquired, call: ResolvedCallOptions): Promise<void>;
}

/**
 * xlock/slock: creates the resource's document on first use (without a lock: the lock is then
 * taken by the engine's checked update, never by an unchecked stamp), then acquires. Waiting and
 * abandonment as for document locks: a lock written after the caller gave up is released.
 */
export async function lockResource(
  site: ResourceAcquireSite,
  type: ResourceLockType,
  resource: unknown,
  lockId: unknown,
  params: unknown,
  maxConcurrent: unknown,
  cancellation?: Cancellation,
): Promise<ResourceHandle> {
  const name = expectResource('resource', resource);
  const group = expectLockId('lockId', lockId);
  const { p, call, details } = site.readParams(params);
  const limit = expectLimit(maxConcurrent);
  const lease = details.ttl ?? Infinity;
  const minHold = expectMinHold('params.minHold', p.minHold, details.ttl ?? MAX_MS);
  const waiting = readWaitParams(p);
  const { signal, dispose } = linkSignals(waiting.signal, cancellation?.signal);
  if (signal?.aborted) throw signal.reason;
  const entry = { group, owner: details.owner ?? null, host: details.host ?? null, comment: details.comment ?? null, renewedAt: null };
  const extras: AcquireExtras = {
    entry,
    conditions: (at) => (type === 'shared' ? sharedConditions(site.paths, group, limit, at) : []),
    refusal: (lock, now) => (type === 'shared' ? sharedRefusal(lock, group, limit, now) : undefined),
    update: (_at, exp) => acquisitionExtra(gcDateOf(exp, site.gcAfter)),
    minHold,
  };
  const acquisition = new Acquisition((written) => site.releaseWritten(written, call), site.clock, () => site.engine.readClock({ _id: name }, call));
  // An attempt still queued in the client when the call is abandoned is not sent.
  const attemptCall = { ...call, abandoned: () => acquisition.abandoned };
  const attempt = (): Promise<Acquired> => acquisition.attempt(() => acquireCreating(site, name, type, lease, attemptCall, extras), (won) => won);
  try {
    const won = await retryWithin(
      { wait: waiting.wait, signal },
      () => acquisition.race(attempt(), signal, (outcome) => outcome),
      (error) => {
        const held = isLockError(error, 'LockAlreadyTaken');
        if (held && waiting.wait > 0 && cancellation?.unsupported) site.warnUncancellable(waiting.wait);
        // Purged under each of the attempt's creations (purges of other processes): created again while the wait lasts.
        return held || isLockError(error, 'RessourceNotFound');
      },
      () => site.clock.local(),
    );
    const handle = new ResourceHandle(won.lock, site, name, group, details.ttl);
    if (handle.remaining() > 0) return handle;
    const late = lockError('DbError', call.boom, { detail: `the reply came after the lease (${lease} ms) had ended: the network or the server is slower than this ttl allows` });
    await acquisition.abandon(late, won);
    throw late;
  } catch (error) {
    await acquisition.abandon(error);
    const written = lockWrittenBy(error);
    if (written) (error as { lock: unknown }).lock = new ResourceHandle(written.lock, site, name, group, details.ttl, true);
    throw error;
  } finally {
    dispose();
  }
}

/** One acquisition attempt on `name`, creating its document first when this client has not seen it (again after a purge). */
async function acquireCreating(site: ResourceAcquireSite, name: string, type: ResourceLockType, lease: number, call: ResolvedCallOptions, extras: AcquireExtras): Promise<Acquired> {
  for (let round = 1; ; round++) {
    if (!site.known.has(name)) {
      await withDbErrors(call.boom, () => site.store.ensureResource(createResourceOperation(site.paths, name, gcDateOf(new Date(site.clock.lower()), site.gcAfter)), call));
      site.known.add(name);
    }
    try {
      return await site.engine.acquire({ _id: name }, type, lease, call, extras);
    } catch (error) {
      if (!isLockError(error, 'RessourceNotFound') || round === CREATE_ROUNDS) throw error;
      site.known.delete(name); // purged meanwhile: create it again
    }
  }
}
