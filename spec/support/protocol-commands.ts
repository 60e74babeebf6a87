/**
 * The commands of the protocol model test: each runs one operation against the real library and
 * the model (spec/support/protocol-model.ts) and fails on the first divergence.
 */
import { expect } from 'chai';
import type fc from 'fast-check';
import { LockHandle } from '../../lib';
import { sleep } from './fixture';
import { isAcquisition, isCommit, isExtension } from './lock-commands';
import {
  afterCommand,
  callOptions,
  checkHandleTimes,
  EXPIRED_BY,
  expectOutcome,
  faultText,
  filterOf,
  isContinuationOf,
  isReleaseOf,
  mentions,
  observe,
  stats,
  withFault,
  type Real,
  type RealWaiter,
} from './protocol-harness';
import {
  faultable,
  kindOf,
  ProtocolModel,
  type Fault,
  type ModelHandle,
  type Tag,
  type Target,
  type Waiter,
} from './protocol-model';

export type Command = fc.AsyncCommand<ProtocolModel, Real>;

export class Acquire implements Command {
  constructor(
    readonly owner: 'writeLock' | 'multiLock' | 'semaphore',
    readonly tag: Tag,
    readonly target: Target,
    readonly fair: boolean,
    readonly fault: Fault,
    /** Ask for the locked document's balance with the lock (`document: { balance: 1 }`). */
    readonly withDocument = false,
    /** A semaphore's acquisition: the permits it takes. */
    readonly permits = 1,
  ) {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const what = this.toString();
    const from = real.faults.replied.length;
    const params = {
      ...(this.owner === 'multiLock' ? { tag: this.tag } : {}),
      ...(this.owner === 'semaphore' ? { permits: this.permits } : {}),
      ...(this.fair ? { fair: true } : {}),
      ...(this.withDocument ? { document: { balance: 1 } } : {}),
      ...callOptions(this.fault),
    };
    const observed = await withFault(real, this.fault, isAcquisition, () => real.locks[this.owner].acquire(filterOf(this.target), params), what);
    const given = (observed.value ?? observed.error?.lock) as LockHandle | undefined;
    const step = model.acquire(this.owner, this.tag, this.target, this.fair, this.fault, given?.id, this.permits);
    expectOutcome(observed, step, what, true);
    if (step.handle && given) real.handles[step.handle.key] = given;
    // A lost acquisition's lock is released by monglock in the background: wait for that release.
    if (this.fault !== 'none' && given) await real.faults.replyOf(isReleaseOf(given.id), from, `${what}: the background release of err.lock`);
    if (observed.status === 'resolved' && given && step.handle?.doc) {
      await checkHandleTimes(real, given, step.handle.doc, what);
      // The document read with the lock is the one locked, as the model has it (the commits' balance), without the lock field.
      const expected = this.withDocument ? { _id: step.handle.doc, balance: model.doc(step.handle.doc).balance } : undefined;
      expect(given.document, `${what}: the document returned with the lock`).to.deep.equal(expected);
    }
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `acquire(${this.owner}${this.owner === 'multiLock' ? ` ${this.tag}` : this.owner === 'semaphore' ? ` ${this.permits} permit(s)` : ''} on ${this.target}${this.fair ? ', fair' : ''}${this.withDocument ? ', document' : ''}${faultText(this.fault)})`;
  }
}

/** Picks one of the handles `eligible` keeps: two picks in three among the latest three (live locks, mostly), else any (stale ones, mostly). */
export function picked(model: Readonly<ProtocolModel>, pick: number, eligible: (handle: ModelHandle) => boolean): ModelHandle | undefined {
  return biased(model.handles.filter(eligible), pick);
}

/** The `pick`-th of `candidates` (oldest first), two picks in three among the latest three. */
export function biased<T>(candidates: readonly T[], pick: number): T | undefined {
  if (candidates.length === 0) return undefined;
  const n = Math.floor(pick / 3);
  return pick % 3 === 0 ? candidates[n % candidates.length] : candidates[candidates.length - 1 - (n % Math.min(3, candidates.length))];
}

export type Via = 'handle' | 'lock' | 'json';

/** Which handles a command may use: a faulty call only through the faulty collection; the lock's API only for a handle whose document is known; JSON only without faults (a JSON lock waits out its stamp window when settled). */
export const usable = (fault: Fault, via: Via) => (handle: ModelHandle): boolean =>
  (fault === 'none' || faultable(handle.owner)) && (via === 'handle' || !handle.unconfirmed) && (via !== 'json' || fault === 'none');

/** The lock as the command passes it: the handle, or its JSON. */
export function lockArgument(real: Real, handle: ModelHandle, via: Via): unknown {
  const given = real.handles[handle.key];
  return via === 'json' ? JSON.parse(JSON.stringify(given)) : given;
}

export class Continue implements Command {
  constructor(
    readonly pick: number,
    readonly fault: Fault,
  ) {}

  private handle(model: Readonly<ProtocolModel>): ModelHandle | undefined {
    return picked(model, this.pick, (handle) => kindOf(handle.owner) === 'multiLock' && !handle.unconfirmed && (this.fault === 'none' || faultable(handle.owner)));
  }

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && this.handle(model) !== undefined;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const handle = this.handle(model)!;
    const what = `continue(h${handle.key}${faultText(this.fault)})`;
    const given = real.handles[handle.key]!;
    const observed = await withFault(
      real,
      this.fault,
      isContinuationOf(handle.id),
      () => real.locks[handle.owner].acquire({ _id: handle.doc }, { lock: given, ...callOptions(this.fault) }),
      what,
    );
    const step = model.continueLock(handle, this.fault);
    expectOutcome(observed, step, what, true);
    const returned = (observed.value ?? observed.error?.lock) as LockHandle | undefined;
    if (returned) expect(returned.id, `${what}: the same lock`).to.equal(handle.id);
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `continue(#${this.pick}${faultText(this.fault)})`;
  }
}

/** A command on a lock the model handed out earlier: which one (`pick`), through what (`via`), with which fault. */
export abstract class HandleCommand implements Command {
  constructor(
    readonly pick: number,
    readonly via: Via,
    readonly fault: Fault,
  ) {}

  protected handle(model: Readonly<ProtocolModel>): ModelHandle | undefined {
    return picked(model, this.pick, usable(this.fault, this.via));
  }

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && this.handle(model) !== undefined;
  }

  abstract run(model: ProtocolModel, real: Real): Promise<void>;
  abstract toString(): string;
}

export class Release extends HandleCommand {
  async run(model: ProtocolModel, real: Real): Promise<void> {
    const handle = this.handle(model)!;
    const what = `release(h${handle.key} by ${this.via}${faultText(this.fault)})`;
    const options = callOptions(this.fault);
    const observed = await withFault(
      real,
      this.fault,
      isReleaseOf(handle.id),
      () =>
        this.via === 'handle'
          ? real.handles[handle.key]!.release(options)
          : real.locks[handle.owner].release({ _id: handle.doc }, { lock: lockArgument(real, handle, this.via), ...options }),
      what,
    );
    expectOutcome(observed, model.release(handle, this.via === 'handle', this.fault), what);
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `release(#${this.pick} by ${this.via}${faultText(this.fault)})`;
  }
}

export class Commit extends HandleCommand {
  constructor(
    pick: number,
    readonly amount: number,
    via: Via,
    fault: Fault,
  ) {
    super(pick, via, fault);
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const handle = this.handle(model)!;
    const what = `commit(h${handle.key} $inc ${this.amount} by ${this.via}${faultText(this.fault)})`;
    const params = { update: { $inc: { balance: this.amount } }, ...callOptions(this.fault) };
    const observed = await withFault(
      real,
      this.fault,
      (method, args) => isCommit(method, args) && mentions(args, handle.id),
      () =>
        this.via === 'handle'
          ? real.handles[handle.key]!.release(params)
          : real.locks[handle.owner].release({ _id: handle.doc }, { lock: lockArgument(real, handle, this.via), ...params }),
      what,
    );
    if (expectOutcome(observed, model.commit(handle, this.amount, this.fault), what) === 'halt') {
      model.halted = `${what}: ${observed.error?.message}`;
      return;
    }
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `commit(#${this.pick} $inc ${this.amount} by ${this.via}${faultText(this.fault)})`;
  }
}

export class Extend extends HandleCommand {
  async run(model: ProtocolModel, real: Real): Promise<void> {
    const handle = this.handle(model)!;
    const what = `extend(h${handle.key} by ${this.via}${faultText(this.fault)})`;
    const given = real.handles[handle.key]!;
    const options = callOptions(this.fault);
    const observed = await withFault(
      real,
      this.fault,
      (method, args) => isExtension(method, args) && mentions(args, handle.id),
      () =>
        this.via === 'handle'
          ? given.extend(undefined, options)
          : real.locks[handle.owner].extend({ _id: handle.doc }, { lock: lockArgument(real, handle, this.via), ...options }),
      what,
    );
    expectOutcome(observed, model.extend(handle, this.fault), what);
    if (observed.status === 'resolved' && handle.doc) {
      const returned = observed.value as LockHandle;
      expect(returned.fence, `${what}: the fence stays`).to.equal(handle.fence);
      await checkHandleTimes(real, returned, handle.doc, what);
      // The handle passed in learns the new expiry too (a JSON copy cannot).
      if (this.via !== 'json') expect(given.expiresAt, `${what}: the handle passed in learns the new expiry`).to.equal(returned.expiresAt);
    }
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `extend(#${this.pick} by ${this.via}${faultText(this.fault)})`;
  }
}

/** handle.convert(read ↔ write) of a confirmed multiLock handle, without wait or fault. */
export class Convert implements Command {
  constructor(readonly pick: number) {}

  private handle(model: Readonly<ProtocolModel>): ModelHandle | undefined {
    return picked(model, this.pick, (handle) => handle.owner === 'multiLock' && !handle.unconfirmed && handle.doc !== undefined);
  }

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && this.handle(model) !== undefined;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const handle = this.handle(model)!;
    const to: Tag = handle.tag === 'read' ? 'write' : 'read';
    const what = `convert(h${handle.key} ${handle.tag} → ${to})`;
    const given = real.handles[handle.key]!;
    const observed = await observe(given.convert(to));
    expectOutcome(observed, model.convert(handle, to), what, true);
    if (observed.status === 'resolved') expect({ tag: given.tag, fence: given.fence }, `${what}: the handle follows`).to.deep.equal({ tag: handle.tag, fence: handle.fence });
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `convert(#${this.pick})`;
  }
}

export class ForceRelease implements Command {
  constructor(readonly target: 'a' | 'b' | 'missing') {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const what = this.toString();
    const observed = await observe(real.locks.writeLock.release(filterOf(this.target)));
    expectOutcome(observed, model.forceRelease(this.target), what);
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `forceRelease(writeLock on ${this.target})`;
  }
}

/** The server's clock passes a live entry's expiry: its `exp` is moved into the past, and `until` down to the latest expiry left. */
export class Expire implements Command {
  constructor(readonly pick: number) {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && model.liveEntries().length > 0;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    // Oldest lock first (by when it was handed out), so that the bias favours the latest.
    const age = (id: string): number => model.handles.findIndex((handle) => handle.id === id);
    const chosen = biased([...model.liveEntries()].sort((x, y) => age(x.id) - age(y.id)), this.pick)!;
    const what = `expire(${chosen.tag} ${chosen.id.slice(0, 6)} in ${chosen.doc})`;
    // One update, guarded by the fence read: a fair waiter this expiry unblocks may acquire meanwhile, and `until` must still cover it.
    for (let attempt = 1; ; attempt++) {
      const past = new Date(Date.now() - EXPIRED_BY);
      const doc = await real.raw.findOne({ _id: chosen.doc as never });
      const lock = (doc?.lock ?? {}) as { fence?: number; tags?: Record<string, Array<{ id: string; exp: Date }>>; queue?: Array<{ exp: Date }> };
      const others = [...Object.values(lock.tags ?? {}).flat().filter((entry) => entry.id !== chosen.id), ...(lock.queue ?? [])].map((item) => item.exp.getTime());
      const moved = await real.raw.updateOne(
        { _id: chosen.doc as never, 'lock.fence': lock.fence, [`lock.tags.${chosen.tag}.id`]: chosen.id },
        { $set: { [`lock.tags.${chosen.tag}.$[expiring].exp`]: past, 'lock.until': new Date(Math.max(past.getTime(), ...others)) } },
        { arrayFilters: [{ 'expiring.id': chosen.id }] },
      );
      if (moved.modifiedCount === 1) break;
      expect(attempt, `${what}: the entry is stored`).to.be.below(5);
    }
    model.expire(chosen.doc, chosen.tag, chosen.id);
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `expire(#${this.pick})`;
  }
}

/**
 * A fair acquisition with `wait` on a blocked document, from another lock object (another client):
 * it queues with a ticket and waits in the background. Its ticket must come last in the queue (a
 * lagging clock could stamp it before an earlier waiter's): otherwise it is aborted, and the
 * command does nothing.
 */
export class StartWaiter implements Command {
  constructor(
    readonly owner: Waiter['owner'],
    readonly doc: 'a' | 'b',
  ) {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && model.waiters.length < 3 && model.mayStartWaiter(this.owner, this.doc);
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const what = this.toString();
    const controller = new AbortController();
    const params = { ...(this.owner === 'fairMultiLock' ? { tag: 'read' } : {}), wait: 120_000, signal: controller.signal };
    const waiting: RealWaiter = {
      promise: observe(real.locks[this.owner].acquire({ _id: this.doc }, params)).then((observed) => {
        waiting.settled = true;
        return observed;
      }),
      settled: false,
      controller,
    };
    const known = new Set(model.doc(this.doc).queue.map((ticket) => ticket.id));
    const { ticket, last } = await newTicket(real, this.doc, known, `${what}: the waiter's ticket`);
    expect(waiting.settled, `${what}: the waiter waits`).to.equal(false);
    if (!last) {
      stats.waitersReordered++;
      controller.abort(new Error('ticket out of order'));
      await waiting.promise;
    } else {
      real.waiters.set(ticket, waiting);
      model.startWaiter(this.owner, this.doc, ticket);
    }
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `startFairWaiter(${this.owner === 'fairWriteLock' ? 'writeLock write' : 'multiLock read'} on ${this.doc}, wait)`;
  }
}

/** The id of the ticket in `doc`'s queue that is not `known`, once there, and whether it is ordered after all the others (by stamp, then id). */
export async function newTicket(real: Real, doc: string, known: ReadonlySet<string>, what: string): Promise<{ ticket: string; last: boolean }> {
  const until = Date.now() + 8_000;
  for (;;) {
    const stored = await real.raw.findOne({ _id: doc as never });
    const queue = (stored?.lock?.queue ?? []) as Array<{ id: string; at: Date }>;
    const mine = queue.find((ticket) => !known.has(ticket.id));
    if (mine) {
      const last = queue.every((ticket) => ticket === mine || ticket.at.getTime() < mine.at.getTime() || (ticket.at.getTime() === mine.at.getTime() && ticket.id < mine.id));
      return { ticket: mine.id, last };
    }
    if (Date.now() > until) throw new Error(`${what} did not appear within 8 s`);
    await sleep(10);
  }
}
