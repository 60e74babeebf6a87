import type { Document } from 'mongodb';
import type { DocumentOf, DocumentOptionOf } from '../common/options';
import type { LockHandle } from '../locks/lock-handle';
import type { MultiLock } from '../locks/multi-lock';
import type { Semaphore } from '../locks/semaphore';
import type { WriteLock } from '../locks/write-lock';
import { acquireGroup, type AcquireAllParams } from './acquire-all';
import type { GroupRequest } from './group-request';
import type { LockGroup } from './lock-group';
import { useGroup, type UsingAllBody, type UsingAllParams } from './using-all';

/* eslint-disable @typescript-eslint/no-explicit-any */
/** The schema of a lock's collection. */
export type SchemaOf<L> = L extends WriteLock<infer S, any> ? S : L extends MultiLock<infer S, any, any> ? S : L extends Semaphore<infer S, any> ? S : Document;
/** The `Promise` option of a lock. */
export type PromiseOptionOf<L> = L extends WriteLock<any, infer P> ? P : L extends MultiLock<any, infer P, any> ? P : L extends Semaphore<any, infer P> ? P : undefined;
/* eslint-enable @typescript-eslint/no-explicit-any */

/** The handle a request of a group resolves to, for group params `A`. */
export type HandleOfRequest<R, A> = R extends { readonly lock: infer L } ? LockHandle<SchemaOf<L>, PromiseOptionOf<L>, DocumentOf<SchemaOf<L>, DocumentOptionOf<A>>> : never;

/** The handles of `requests` `R`, in their order. */
export type HandlesOf<R extends readonly GroupRequest[], A> = { -readonly [K in keyof R]: HandleOfRequest<R[K], A> };

/**
 * Locks several documents, all or nothing, deadlock-free: resolves a {@link LockGroup} (the
 * handles, in the order of `requests`, with `release()`, `extend()` and `remaining()` for all),
 * or rejects holding nothing, naming the request that refused (`err.request`). Each request
 * selects exactly one document (of any collection, with any writeLock, multiLock or semaphore);
 * the documents are locked in a canonical order (namespace, then `_id` in BSON order) that every
 * process computes alike, and it never waits while holding part of the set.
 * @throws {TypeError | RangeError} before anything is read or written, on bad requests or params.
 * @example
 * const [from, to] = await acquireAll([
 *   { lock: accounts, filter: { _id: 'alice' } },
 *   { lock: accounts, filter: { _id: 'bob' } },
 * ], { wait: 5000 });
 * try { … } finally { await from.release(); await to.release(); } // or: the group's release()
 */
export const acquireAll: <const R extends readonly GroupRequest[], A extends AcquireAllParams = AcquireAllParams>(
  requests: R,
  params?: A,
) => Promise<LockGroup<HandlesOf<R, A>>> = acquireGroup as never;

/**
 * {@link acquireAll}, then runs `body` while every lease is kept alive; its `signal` aborts as
 * soon as one member is lost (or `maxHold` passes: every member is then released); every member
 * is released at the end. The body may return `commitAll([update, …], value)`: each document's
 * update is applied by its own release, only while its lock is held.
 * @example
 * await usingAll(requests, { wait: 5000, document: { balance: 1 } }, ([from, to]) =>
 *   commitAll([{ $inc: { balance: -10 } }, { $inc: { balance: 10 } }], 'done'));
 */
export const usingAll: <T, const R extends readonly GroupRequest[], A extends UsingAllParams = UsingAllParams>(
  requests: R,
  params: A | undefined,
  body: UsingAllBody<T, LockGroup<HandlesOf<R, A>>>,
) => Promise<T> = useGroup as never;
