export { writeLock, WRITE_TAG } from './write-lock';
export type { WriteLock, WriteLockOptions, WriteLockAcquireParams, WriteLockReleaseParams, WriteLockExtendParams } from './write-lock';
export { multiLock } from './multi-lock';
export type { MultiLock, MultiLockOptions, MultiLockAcquireParams, MultiLockReleaseParams, MultiLockExtendParams } from './multi-lock';
export { LockHandle } from './lock-handle';
export { commit, Commit } from './commit';
export type { HandleParams, LockData } from './lock-handle';
export type { PromiseLibraries, PromiseOf } from './promise-types';
export { LockError, isLockError } from './errors';
export type { LockErrorType, LockErrorSubtype, LockErrorFields, BoomLike } from './errors';
export type {
  CallOptions,
  DocumentOf,
  DocumentOption,
  DocumentParams,
  HoldParams,
  LockFilter,
  LockOptions,
  LockUpdate,
  PromiseLibrary,
  UpdateParams,
  WriteConcernW,
} from './options';
export type { LockRelationships, TagRelationship } from './relationships';
export type { StoredLock, StoredEntry } from './stored-format';
export type { UsingBody } from './scoped-hold';
export type { WaitOptions } from './waiting';
export { resourceLocks, ResourceLockHandle } from './resource-locks';
export { clearV2Locks } from './v2-upgrade';
export type { ClearV2LocksOptions, ClearedV2Locks } from './v2-upgrade';
export type { ResourceLocks, ResourceLocksOptions, ResourceLockParams, ResourceUsingParams, ResourceLockType, LockDetails, LockStatus, StatusFilter } from './resource-locks';
export { CHANNELS } from './diagnostics';
export type { LockCallContext, LeaseLostEvent, LeaseLossCause, ExtensionFailedEvent, WaitEvent } from './diagnostics';
