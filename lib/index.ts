/**
 * `monglock`: the locks (writeLock, multiLock, semaphore, resourceLocks), their handles, `commit`,
 * groups (acquireAll, usingAll, commitAll), errors, diagnostics channels and the doctor.
 * @module monglock
 */
export { writeLock, WRITE_TAG } from './locks/write-lock';
export type { WriteLock, WriteLockOptions, WriteLockAcquireParams, WriteLockReleaseParams, WriteLockExtendParams } from './locks/write-lock';
export { multiLock } from './locks/multi-lock';
export type { MultiLock, MultiLockOptions, MultiLockAcquireParams, MultiLockReleaseParams, MultiLockExtendParams } from './locks/multi-lock';
export { semaphore, PERMIT_TAG } from './locks/semaphore';
export type { Semaphore, SemaphoreOptions, SemaphoreAcquireParams, SemaphoreReleaseParams, SemaphoreExtendParams } from './locks/semaphore';
export { withOwner } from './locks/owner-context';
export type { ForceReleaseParams } from './locks/forced-release';
export { quarantine, Quarantine } from './locks/quarantine';
export type { QuarantineParams, QuarantineOptions, ClearQuarantineParams } from './locks/quarantine';
export type { QuarantineData } from './engine/quarantined';
export { MAX_HOLDS } from './protocol/reentry';
export { LockHandle } from './locks/lock-handle';
export { commit, Commit, type CommitOptions } from './locks/commit';
export type { DocumentField, HandleParams, LockData } from './locks/lock-handle';
export type { PromiseLibraries, PromiseOf } from './common/promise-types';
export { LockError, isLockError } from './common/errors';
export type { ConflictSubtype, LockErrorType, LockErrorSubtype, LockErrorFields, LockErrorDetails, BoomLike } from './common/errors';
export type {
  CallOptions,
  DocumentOf,
  DocumentOption,
  DocumentOptionOf,
  DocumentParams,
  HoldParams,
  LockFilter,
  LockOptions,
  LockUpdate,
  PromiseLibrary,
  UpdateParams,
  WriteOptions,
  WriteConcernW,
} from './common/options';
export type { MinHoldParams } from './common/min-hold-params';
export type { LockRelationships, TagRelationship, TagLimits } from './locks/relationships';
export type { StoredLock, StoredEntry, StoredCommit, StoredTicket, StoredUpgrade } from './protocol/stored-format';
export type { StoredQuarantine } from './protocol/quarantine';
export type { ConvertParams } from './locks/conversion';
export type { UsingBody } from './locks/scoped-hold';
export type { InspectParams, LockInspection, InspectedLock, InspectedWaiter } from './locks/inspection';
export type { WaitOptions } from './waiting/wait-options';
export { acquireAll, usingAll } from './groups/group-api';
export type { HandleOfRequest, HandlesOf, SchemaOf, PromiseOptionOf } from './groups/group-api';
export type { AcquireAllParams } from './groups/acquire-all';
export type { UsingAllParams, UsingAllBody } from './groups/using-all';
export type { GroupRequest, GroupableLock } from './groups/group-request';
export { commitAll, CommitAll } from './groups/commit-all';
export type { CommitOutcome } from './groups/commit-all';
export { LockGroup } from './groups/lock-group';
export type { LockGroupMethods } from './groups/lock-group';
export { resourceLocks, ResourceLockHandle } from './resources/resource-locks';
export { election } from './election/election';
export type { Election, ElectionOptions, CampaignParams, ObserveParams } from './election/election';
export type { Term } from './election/term';
export type { LeaderState } from './protocol/leader';
export { clearV2Locks } from './locks/v2-upgrade';
export type { ClearV2LocksOptions, ClearedV2Locks } from './locks/v2-upgrade';
export type { ResourceLocks, ResourceLocksOptions, ResourceLockParams, ResourceUsingParams, ResourceLockType, LockDetails, LockStatus, StatusFilter } from './resources/resource-locks';
export { CHANNELS } from './common/diagnostics';
export type { LockCallContext, LeaseLostEvent, LeaseLossCause, ExtensionFailedEvent, WaitEvent } from './common/diagnostics';
export { doctor } from './integrations/cli/doctor';
export type { DoctorOptions, DoctorReport, DoctorFinding, DoctorStatus, DoctorCheck } from './integrations/cli/doctor';
