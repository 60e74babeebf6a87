import type { Document } from 'mongodb';
import { Handle, type HandleOwner, type HandleParams, type LockData, type LockHandle } from '../locks/lock-handle';
import type { PromiseOf } from '../common/promise-types';

/** The two tags of a resource: exclusive (cooperative with both) and shared (cooperative with exclusive). */
export type ResourceLockType = 'exclusive' | 'shared';

/** A held resource lock: a {@link LockHandle} that also names its resource, lock id and type; `P` is the `Promise` option. */
export interface ResourceLockHandle<P = undefined> extends LockHandle<Document, P, never> {
  readonly resource: string;
  /** The group of locks one holder takes and releases together. */
  readonly lockId: string;
  readonly type: ResourceLockType;
  /** The lease it was taken with, in ms (undefined: no expiry); what `extend()` renews to by default. */
  readonly ttl: number | undefined;
  /** Renews the lease to `locktimeout` ms (default: its own `ttl`) from the server's now. */
  extend(locktimeout?: number, params?: HandleParams<Document>): PromiseOf<P, this>;
  toJSON(): LockData & { resource: string; lockId: string };
}

/** The class behind every {@link ResourceLockHandle}. */
export class ResourceHandle extends Handle implements ResourceLockHandle<unknown> {
  declare readonly document: never;

  constructor(
    data: LockData,
    owner: HandleOwner,
    readonly resource: string,
    readonly lockId: string,
    readonly ttl: number | undefined,
    unconfirmed = false,
  ) {
    super(data, owner, { _id: resource }, { unconfirmed });
  }

  get type(): ResourceLockType {
    return this.tag as ResourceLockType;
  }

  override extend(locktimeout: number | undefined = this.ttl, params?: HandleParams): Promise<this> {
    return super.extend(locktimeout, params);
  }

  override toJSON(): LockData & { resource: string; lockId: string } {
    return { ...super.toJSON(), resource: this.resource, lockId: this.lockId };
  }
}

/** `value instanceof ResourceLockHandle` is true for the handles resource locks make. */
export const ResourceLockHandle: {
  readonly prototype: ResourceLockHandle<unknown>;
  [Symbol.hasInstance](value: unknown): value is ResourceLockHandle<unknown>;
} = ResourceHandle as never; // a class answers instanceof (Function.prototype[Symbol.hasInstance])
