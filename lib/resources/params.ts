import { knownKeys } from '../common/known-keys';
import { CALL_KEYS, FIXED_PER_LOCK, readParams } from '../common/options';
import { describe, expectMs } from '../common/validation';
import type { ResourceLockParams, ResourceLocksOptions, ResourceUsingParams } from './resource-locks';

/** Who holds a lock, and for how long. */
export interface LockDetails {
  readonly owner?: string;
  readonly host?: string;
  readonly comment?: string;
  /** Lease in ms. None: the lock never expires (until unlocked). */
  readonly ttl?: number;
}

/** Filter of `status`: every field narrows the result. */
export interface StatusFilter {
  readonly resource?: string;
  readonly lockId?: string;
  readonly owner?: string;
  readonly createdBefore?: Date;
  readonly createdAfter?: Date;
  /** Remaining lease below this many ms (locks without expiry never match). */
  readonly ttlBelow?: number;
  /** Remaining lease at least this many ms (locks without expiry always match). */
  readonly ttlAtLeast?: number;
}

const NO_FAIR = 'fair mode is for document locks (writeLock, multiLock); resource locks wait with backoff';
const LOCK_DETAILS = ['owner', 'host', 'comment', 'ttl'] as const;

/** The keys of {@link ResourceLocksOptions}. */
export const RESOURCE_LOCKS_OPTIONS = knownKeys<ResourceLocksOptions>()([...CALL_KEYS, 'collection', 'Promise', 'clock', 'gcAfter', 'maxClockSkew'], {
  field: 'the field is fixed (`lock`) for resource locks',
  shardKey: 'a resource document is addressed by its name (`_id`): shard a lock collection on `_id`, if at all',
  fair: NO_FAIR,
  changeStreams: 'resource locks wait with backoff; change-stream wake-ups are for document locks',
});
/** The keys of {@link ResourceLockParams} (`xlock`, `slock`). */
export const RESOURCE_LOCK_PARAMS = knownKeys<ResourceLockParams>()([...CALL_KEYS, ...LOCK_DETAILS, 'wait', 'signal', 'minHold'], {
  ...FIXED_PER_LOCK,
  fair: NO_FAIR,
  shared: 'xlock is exclusive and slock shared; `shared` is an option of `using`',
  maxConcurrent: 'the limit of shared holders is the fourth argument: `slock(resource, lockId, params, maxConcurrent)`',
});
/** The keys of {@link ResourceUsingParams}. */
export const RESOURCE_USING_PARAMS = knownKeys<ResourceUsingParams>()([...CALL_KEYS, ...LOCK_DETAILS, 'wait', 'signal', 'maxHold', 'shared', 'maxConcurrent', 'minHold'], {
  ...FIXED_PER_LOCK,
  fair: NO_FAIR,
});
const STATUS_FILTER = knownKeys<StatusFilter>()(['resource', 'lockId', 'owner', 'createdBefore', 'createdAfter', 'ttlBelow', 'ttlAtLeast']);

/** Throws unless `value` is a non-empty string of at most `max` characters. */
export function expectText(name: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new TypeError(`Expected \`${name}\` to be a non-empty string of at most ${max} characters, got ${describe(value)}`);
  }
  return value;
}

/** A resource name (at most 512 characters). */
export function expectResource(name: string, value: unknown): string {
  return expectText(name, value, 512);
}

/** A lock id: the group of locks one holder takes and releases together (at most 256 characters). */
export function expectLockId(name: string, value: unknown): string {
  return expectText(name, value, 256);
}

/** Reads and validates the lock details of `params`. */
export function readLockDetails(params: Record<string, unknown>): LockDetails {
  return {
    owner: optionalText('params.owner', params.owner),
    host: optionalText('params.host', params.host),
    comment: optionalText('params.comment', params.comment),
    ttl: params.ttl === undefined ? undefined : expectMs('params.ttl', params.ttl),
  };
}

/** Throws unless `value` is a usable `maxConcurrent`: a non-zero integer (negative: unlimited). */
export function expectLimit(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new TypeError(`Expected \`maxConcurrent\` to be an integer (negative: unlimited), got ${describe(value)}`);
  }
  if (value === 0) throw new RangeError('Expected `maxConcurrent` not to be 0 (nobody could ever hold the lock); use a negative number for unlimited');
  return value;
}

/** Reads and validates a `status` filter. */
export function readStatusFilter(filter: unknown): StatusFilter {
  const f = readParams('filter', filter, STATUS_FILTER, false);
  const date = (name: string, value: unknown): Date | undefined => {
    if (value === undefined) return undefined;
    if (!(value instanceof Date) || Number.isNaN(value.getTime())) throw new TypeError(`Expected \`filter.${name}\` to be a Date, got ${describe(value)}`);
    return value;
  };
  return {
    resource: f.resource === undefined ? undefined : expectResource('filter.resource', f.resource),
    lockId: f.lockId === undefined ? undefined : expectLockId('filter.lockId', f.lockId),
    owner: optionalText('filter.owner', f.owner),
    createdBefore: date('createdBefore', f.createdBefore),
    createdAfter: date('createdAfter', f.createdAfter),
    ttlBelow: f.ttlBelow === undefined ? undefined : expectMs('filter.ttlBelow', f.ttlBelow, 0),
    ttlAtLeast: f.ttlAtLeast === undefined ? undefined : expectMs('filter.ttlAtLeast', f.ttlAtLeast, 0),
  };
}

function optionalText(name: string, value: unknown): string | undefined {
  return value === undefined ? undefined : expectText(name, value, 1024);
}
