import { LockHandle, type HandleOwner, type LockData } from './lock-handle';

/** The two tags of a resource: exclusive (cooperative with both) and shared (cooperative with exclusive). */
export type ResourceLockType = 'exclusive' | 'shared';

/** A held resource lock: a {@link LockHandle} that also names its resource, lock id and type. */
export class ResourceLockHandle extends LockHandle {
  constructor(
    data: LockData,
    owner: HandleOwner,
    readonly resource: string,
    readonly lockId: string,
    /** The lease it was taken with, in ms (undefined: no expiry); what `extend()` renews to by default. */
    readonly ttl: number | undefined,
    unconfirmed = false,
  ) {
    super(data, owner, { _id: resource }, { unconfirmed });
  }

  get type(): ResourceLockType {
    return this.tag as ResourceLockType;
  }

  /** Renews the lease to `locktimeout` ms (default: its own `ttl`) from the server's now. */
  override extend(locktimeout: number | undefined = this.ttl, params?: object): Promise<this> {
    return super.extend(locktimeout, params);
  }

  override toJSON(): LockData & { resource: string; lockId: string } {
    return { ...super.toJSON(), resource: this.resource, lockId: this.lockId };
  }
}
