/**
 * The harness of the protocol model test (spec/protocol/protocol-model.spec.ts): the real side of
 * a sequence (a collection whose chosen calls lose their request or reply, the four lock objects,
 * the handles), how a call's outcome is observed and compared with the model's, and the checks of
 * the stored state after every command.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, semaphore, writeLock, LockHandle, type MultiLock, type Semaphore, type WriteLock } from '../../lib';
import { delayedCollection, type Delays, type DelayedMethod } from '../../stress/delayed-collection';
import { freshCollection, sleep } from './fixture';
import { never } from './lock-commands';
import { checkFences, journalOf, modelView, storedView } from './protocol-rollback';
import { ReplicaSet } from './replica-set';
import {
  DOC_IDS,
  kindOf,
  LEASE_MS,
  PERMIT_LIMIT,
  ProtocolModel,
  type Expected,
  type Fault,
  type Owner,
  type Step,
  type Tag,
  type Target,
} from './protocol-model';

/** The `timeout` of a call whose request or reply is lost, in ms. */
export const FAULT_TIMEOUT = 400;
export const START_BALANCE = 1_000;
/** How far into the past an expired entry's `exp` is moved, in ms: beyond every stamp tolerance. */
export const EXPIRED_BY = 60_000;

export type Matcher = (method: DelayedMethod, args: readonly unknown[]) => boolean;

/** Loses the request or the reply of the next call `arm` names, once; records every call that got its reply. */
export class FaultPlan {
  private armed: { phase: 'request' | 'reply'; match: Matcher } | undefined;
  private fired = false;
  readonly replied: Array<{ method: DelayedMethod; args: readonly unknown[] }> = [];
  readonly delays: Delays = {
    request: (method, _n, args) => this.take('request', method, args),
    reply: (method, _n, args) => {
      this.replied.push({ method, args });
      return this.take('reply', method, args);
    },
  };

  arm(fault: Fault, match: Matcher): void {
    this.fired = false;
    this.armed = fault === 'none' ? undefined : { phase: fault === 'lostRequest' ? 'request' : 'reply', match };
  }

  /** Disarms; true when the armed fault was applied. */
  disarm(): boolean {
    this.armed = undefined;
    return this.fired;
  }

  /** Resolves once a call matching `match` got its reply (from the `from`-th on), or fails after `ms`. */
  async replyOf(match: Matcher, from: number, what: string, ms = 8_000): Promise<void> {
    const until = Date.now() + ms;
    while (!this.replied.slice(from).some((call) => match(call.method, call.args))) {
      if (Date.now() > until) throw new Error(`${what} did not happen within ${ms} ms`);
      await sleep(10);
    }
  }

  private take(phase: 'request' | 'reply', method: DelayedMethod, args: readonly unknown[]): Promise<never> | undefined {
    if (this.armed?.phase !== phase || !this.armed.match(method, args)) return undefined;
    this.armed = undefined;
    this.fired = true;
    return never;
  }
}

/** The part of writeLock and multiLock that the handle commands call by the lock's API. */
export interface LockApi {
  acquire(filter: Document, params: Record<string, unknown>): Promise<LockHandle>;
  release(filter: Document, params?: Record<string, unknown>): Promise<void>;
  extend(filter: Document, params: Record<string, unknown>): Promise<LockHandle>;
}

export interface Real {
  /** The collection itself: what the test reads, and where it moves expiries. */
  readonly raw: Collection<Document>;
  /** The replica set every lock writes through (spec/support/replica-set.ts): what a failover rolls back. */
  readonly replica: ReplicaSet;
  readonly faults: FaultPlan;
  readonly locks: Record<Owner, LockApi>;
  /** The real handle (or `err.lock`) of each model handle, by its key. */
  readonly handles: LockHandle[];
  /** The fair waiters in the background, by ticket id. */
  readonly waiters: Map<string, RealWaiter>;
}

export interface RealWaiter {
  readonly promise: Promise<Observed>;
  settled: boolean;
  readonly controller: AbortController;
}

/** Counts over the whole run, for the report. */
export const stats = { sequences: 0, operations: 0, faultsFired: 0, waitersWon: 0, waitersReordered: 0, contestedHandOvers: 0, inconclusive: 0, outcomes: {} as Record<string, number> };

export interface Observed {
  readonly status: 'resolved' | 'rejected';
  readonly value?: unknown;
  readonly error?: Error & { subtype?: string; lock?: unknown; data?: { applied?: unknown } };
}

export async function observe(promise: PromiseLike<unknown>): Promise<Observed> {
  try {
    return { status: 'resolved', value: await promise };
  } catch (error) {
    return { status: 'rejected', error: error as Observed['error'] };
  }
}

/** An outcome as the model states it: status, subtype, the fence of a handle or `err.lock`, `data.applied`. */
export function summary(observed: Observed, withFence: boolean): Expected {
  if (observed.status === 'resolved') {
    const fence = (observed.value as LockHandle | undefined)?.fence;
    return withFence ? { status: 'resolved', fence } : { status: 'resolved' };
  }
  const error = observed.error;
  const subtype = (error?.subtype ?? `${error?.name}: ${error?.message}`) as never;
  const lock = error?.lock as LockHandle | undefined;
  const applied = error?.data?.applied;
  return { status: 'rejected', subtype, ...(lock ? { lock: { fence: lock.fence } } : {}), ...(applied !== undefined ? { applied: applied as boolean | 'unknown' } : {}) };
}

/** Fails unless the call settled as the model expects. */
export function expectOutcome(observed: Observed, step: Step, what: string, withFence = false): 'halt' | undefined {
  const actual = summary(observed, withFence);
  const name = actual.status === 'resolved' ? 'resolved' : actual.subtype;
  stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1;
  if (actual.status === 'rejected' && actual.applied === 'unknown' && step.expected.status === 'rejected' && step.expected.applied !== undefined && /could not be (reached|read)/.test(observed.error?.message ?? '')) {
    // The settlement itself timed out (a stalled machine): 'unknown' is then the truth, and the entry's state cannot be told.
    stats.inconclusive++;
    return 'halt';
  }
  expect(actual, `${what}: ${observed.error?.message ?? 'resolved'}`).to.deep.equal(step.expected);
  const lock = observed.error?.lock;
  if (lock !== undefined) expect(lock instanceof LockHandle, `${what}: err.lock is a handle`).to.equal(true);
  return undefined;
}

/** The filter of a target. */
export function filterOf(target: Target): Document {
  return target === 'any' ? { kind: 'acct' } : { _id: target };
}

export const mentions = (args: readonly unknown[], id: string): boolean => JSON.stringify(args[0]).includes(id);
export const updateOf = (args: readonly unknown[]): Document => (args[1] ?? {}) as Document;
export const isReleaseOf = (id: string): Matcher => (method, args) => method === 'updateOne' && mentions(args, id) && updateOf(args).$push === undefined && updateOf(args).$pull !== undefined;
export const isContinuationOf = (id: string): Matcher => (method, args) =>
  method === 'findOneAndUpdate' && mentions(args, id) && updateOf(args).$inc === undefined && updateOf(args).$set === undefined;

/** Runs a call with `fault` armed on the command `match` names; checks that the fault was applied. */
export async function withFault(real: Real, fault: Fault, match: Matcher, call: () => PromiseLike<unknown>, what: string): Promise<Observed> {
  real.faults.arm(fault, match);
  const observed = await observe(call());
  const fired = real.faults.disarm();
  if (fault !== 'none') {
    expect(fired, `${what}: the ${fault} was applied`).to.equal(true);
    stats.faultsFired++;
  }
  return observed;
}

export const callOptions = (fault: Fault): Record<string, unknown> => (fault === 'none' ? {} : { timeout: FAULT_TIMEOUT });

/** The documents as stored, against the model: fence, balance, entries per tag (live or not), the queue; `until` covers every live entry. */
export async function checkState(model: ProtocolModel, real: Real, after: string): Promise<void> {
  const stored = await real.raw.find({ _id: { $in: [...DOC_IDS] as never[] } }).toArray();
  const now = Date.now();
  for (const id of DOC_IDS) {
    const doc = stored.find((candidate) => (candidate._id as unknown) === id);
    const lock = (doc?.lock ?? {}) as { until?: Date; tags?: Record<string, Array<{ id: string; exp: Date; permits?: number }>> };
    // Never two holders, by the stored document alone (also after a failover): one live writer at most, the permits within the limit.
    const live = (tag: Tag): Array<{ permits?: number }> => (lock.tags?.[tag] ?? []).filter((entry) => entry.exp.getTime() > now);
    expect(live('write').length, `document ${id} after ${after}: live writers`).to.be.at.most(1);
    expect(live('permit').reduce((sum, entry) => sum + (entry.permits ?? 1), 0), `document ${id} after ${after}: permits held`).to.be.at.most(PERMIT_LIMIT);
    expect(storedView(doc, now), `document ${id} after ${after}`).to.deep.equal(modelView(model, model.doc(id)));
    const liveExp = Math.max(0, ...(['read', 'write', 'permit'] as const).flatMap((tag) => (lock.tags?.[tag] ?? []).map((entry) => entry.exp.getTime()).filter((exp) => exp > now)));
    if (liveExp > 0) expect(lock.until?.getTime() ?? 0, `document ${id} after ${after}: until covers every live entry`).to.be.at.least(liveExp);
  }
}

/** The stored entry of a handle's lock: its `at` and `exp` are the handle's `timestamp` and `expiresAt`. */
export async function checkHandleTimes(real: Real, handle: LockHandle, doc: string, what: string): Promise<void> {
  const stored = await real.raw.findOne({ _id: doc as never });
  const entry = (stored?.lock?.tags?.[handle.tag] as Array<{ id: string; at: Date; exp: Date }> | undefined)?.find((candidate) => candidate.id === handle.id);
  expect({ at: entry?.at.getTime(), exp: entry?.exp.getTime() }, `${what}: the handle's timestamp and expiresAt are the stored entry's`).to.deep.equal({
    at: handle.timestamp,
    exp: handle.expiresAt,
  });
}

/**
 * After each command: the fair waiters the model lets win must win (each checked like an
 * acquisition, in the order they landed, which the model must allow); the others must still wait.
 */
export async function settleWaiters(model: ProtocolModel, real: Real, after: string): Promise<void> {
  const winners = model.mustWin();
  if (winners.some((winner) => model.waiters.filter((waiter) => waiter.doc === winner.doc).length > 1)) stats.contestedHandOvers++;
  const timeout = (): Promise<Observed> => sleep(10_000).then(() => ({ status: 'rejected', error: new Error('the fair waiter did not win within 10 s') }));
  const settled = await Promise.all(winners.map(async (waiter) => ({ waiter, observed: await Promise.race([real.waiters.get(waiter.ticket)!.promise, timeout()]) })));
  const landed = settled.sort((x, y) => ((x.observed.value as LockHandle | undefined)?.fence ?? 0) - ((y.observed.value as LockHandle | undefined)?.fence ?? 0));
  for (const { waiter, observed } of landed) {
    const what = `after ${after}: the fair waiter ${waiter.ticket.slice(0, 6)} (${waiter.owner} ${waiter.tag} on ${waiter.doc})`;
    expect(model.mayWin(waiter.ticket), `${what} won while an earlier ticket or a lock blocked it`).to.equal(true);
    const handle = observed.value as LockHandle | undefined;
    const step = model.waiterWon(waiter.ticket, handle?.id ?? '<no handle>');
    journalOf(model).mark(model, what, true);
    real.waiters.delete(waiter.ticket);
    expectOutcome(observed, step, what, true);
    stats.waitersWon++;
    if (step.handle && handle) {
      real.handles[step.handle.key] = handle;
      await checkHandleTimes(real, handle, waiter.doc, what);
    }
  }
  for (const waiter of model.waiters) {
    expect(real.waiters.get(waiter.ticket)?.settled, `after ${after}: the fair waiter ${waiter.ticket.slice(0, 6)} is blocked, so still waits`).to.equal(false);
  }
}

/**
 * What every command does after its call: the model's state is recorded for a failover (`durable`:
 * the call was answered by a write at majority, so a majority has every state so far), then the
 * fair waiters, the stored state, and the fencing tokens.
 */
export async function afterCommand(model: ProtocolModel, real: Real, what: string, durable = false): Promise<void> {
  stats.operations++;
  journalOf(model).mark(model, what, durable);
  await settleWaiters(model, real, what);
  await checkState(model, real, what);
  checkFences(model, real, what);
}

export function faultText(fault: Fault): string {
  return fault === 'none' ? '' : `, ${fault}`;
}

/** A fresh collection and the four lock objects of one sequence, each with its clock learned (an acquisition on a document the sequence never uses). */
export async function setup(): Promise<{ model: ProtocolModel; real: Real }> {
  const raw = await freshCollection([
    { _id: 'a', kind: 'acct', balance: START_BALANCE },
    { _id: 'b', kind: 'acct', balance: START_BALANCE },
    { _id: 'warm-up' },
  ]);
  const replica = await ReplicaSet.over(raw, DOC_IDS);
  const faults = new FaultPlan();
  const faulty = delayedCollection(replica.collection, faults.delays);
  const rw = { locktimeouts: { read: LEASE_MS, write: LEASE_MS }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } } };
  const locks: Record<Owner, WriteLock | MultiLock | Semaphore> = {
    writeLock: writeLock({ collection: faulty, locktimeout: LEASE_MS }),
    multiLock: multiLock({ collection: faulty, ...rw }),
    semaphore: semaphore({ collection: faulty, limit: PERMIT_LIMIT, locktimeout: LEASE_MS }),
    fairWriteLock: writeLock({ collection: replica.collection, locktimeout: LEASE_MS, fair: true }),
    fairMultiLock: multiLock({ collection: replica.collection, ...rw, fair: true }),
  };
  for (const [owner, lock] of Object.entries(locks)) {
    const handle = await (lock as unknown as LockApi).acquire({ _id: 'warm-up' }, kindOf(owner as Owner) === 'multiLock' ? { tag: 'read' } : {});
    await handle.release();
  }
  stats.sequences++;
  const model = new ProtocolModel(START_BALANCE);
  journalOf(model).mark(model, 'the start', true);
  return { model, real: { raw, replica, faults, locks: locks as unknown as Record<Owner, LockApi>, handles: [], waiters: new Map() } };
}

/** Ends a sequence: every fair waiter still waiting is aborted, rejects with the abort's reason, and its ticket leaves the queue. */
export async function teardown(model: ProtocolModel, real: Real, passed: boolean): Promise<void> {
  if (real.waiters.size === 0) return;
  const reason = new Error('sequence over');
  const waiting = [...real.waiters];
  real.waiters.clear();
  for (const [, waiter] of waiting) waiter.controller.abort(reason);
  const outcomes = await Promise.all(waiting.map(([, waiter]) => waiter.promise));
  if (!passed) return;
  for (const observed of outcomes) expect(observed.error, 'an aborted fair waiter rejects with the abort reason').to.equal(reason);
  for (const [ticket] of waiting) model.waiterAborted(ticket);
  const until = Date.now() + 5_000;
  for (;;) {
    try {
      await checkState(model, real, 'the fair waiters aborted');
      return;
    } catch (error) {
      if (Date.now() > until) throw error;
      await sleep(20);
    }
  }
}
