/**
 * Type test: the package root exports the public API only (checked by `tsc`, never run). Each
 * import below must fail to compile.
 */
// @ts-expect-error: the class behind LockHandle is internal
import type { Handle } from 'monglock';
// @ts-expect-error: the engine is internal
import type { LockEngine } from 'monglock';
// @ts-expect-error: the driver access is internal
import type { Store } from 'monglock';

export type Internals = [Handle, LockEngine, Store];
