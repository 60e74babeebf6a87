/**
 * The commands of the protocol model test: each runs one operation against the real library and
 * the model (spec/support/protocol-model.ts) and fails on the first divergence. (Those that do not
 * call the locks under test, expiry, fair waiters and failovers, are in protocol-environment.ts.)
 */
import { expect } from 'chai';
import type fc from 'fast-check';
import { LockHandle } from '../../lib';
import { isAcquisition, isCommit, isExtension } from './lock-commands';
import {
  afterCommand,
  callOptions,
  checkHandleTimes,
  expectOutcome,
  faultText,
  filterOf,
  isContinuationOf,
  isReleaseOf,
  mentions,
  observe,
  withFault,
  type Real,
} from './protocol-harness';
import { faultable, kindOf, ProtocolModel, type Fault, type ModelHandle, type Tag, type Target } from './protocol-model';
import { lockArgument, picked, usable, type Via } from './protocol-picks';
import { answeredAtMajority, journalOf } from './protocol-rollback';

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
    /** Sent with `w: 1` (as a folded section may be): a failover can roll it back, and its token be issued again. */
    readonly w1 = false,
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
      ...(this.w1 ? { w: 1 } : {}),
      ...callOptions(this.fault),
    };
    const observed = await withFault(real, this.fault, isAcquisition, () => real.locks[this.owner].acquire(filterOf(this.target), params), what);
    const given = (observed.value ?? observed.error?.lock) as LockHandle | undefined;
    // A lost reply's write landed (at majority, unless sent at w: 1) before monglock released it in the background: a state a rollback can return to.
    model.onLanded = () => journalOf(model).mark(model, `${what}: its write landed`, !this.w1);
    const step = model.acquire(this.owner, this.tag, this.target, this.fair, this.fault, given?.id, this.permits);
    model.onLanded = undefined;
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
    await afterCommand(model, real, what, !this.w1 && answeredAtMajority(observed, 'AssertiveLock'));
  }

  toString(): string {
    return `acquire(${this.owner}${this.owner === 'multiLock' ? ` ${this.tag}` : this.owner === 'semaphore' ? ` ${this.permits} permit(s)` : ''} on ${this.target}${this.fair ? ', fair' : ''}${this.withDocument ? ', document' : ''}${this.w1 ? ', w: 1' : ''}${faultText(this.fault)})`;
  }
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
    await afterCommand(model, real, what, answeredAtMajority(observed, 'AssertiveLock'));
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
    // Resolved, or settled (applied or not) by a removal and a read at majority.
    const applied = observed.error?.data?.applied;
    await afterCommand(model, real, what, answeredAtMajority(observed) || applied === true || applied === false);
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
    await afterCommand(model, real, what, answeredAtMajority(observed));
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
    await afterCommand(model, real, what, answeredAtMajority(observed));
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
