/**
 * The vocabulary of the protocol model (spec/support/protocol-model.ts): tags, lock kinds and their
 * relationships, the model's documents, handles and waiters, and how a call's outcome is stated.
 */

/** Tags of the read/write multiLock; a writeLock is the tag `write`, a semaphore the tag `permit`. */
export type Tag = 'read' | 'write' | 'permit';
export type LockKind = 'writeLock' | 'multiLock' | 'semaphore';
/** The lock objects of a sequence: the three under test, and the two fair ones whose waiters wait in the background. */
export type Owner = 'writeLock' | 'multiLock' | 'semaphore' | 'fairWriteLock' | 'fairMultiLock';
/** A lost request (the command never reaches the server) or a lost reply (it ran; its answer never comes). */
export type Fault = 'none' | 'lostReply' | 'lostRequest';
/** What an acquisition's filter selects: one document, the first free one of both, or none. */
export type Target = 'a' | 'b' | 'any' | 'missing';
export type Subtype = 'RessourceNotFound' | 'LockAlreadyTaken' | 'LockWasReacquired' | 'CooperativeLock' | 'AssertiveLock' | 'LockNotFound' | 'DbError' | 'UpgradeConflict' | 'SemaphoreFull';

/** The semaphore's limit: the permits its live entries may hold in all. */
export const PERMIT_LIMIT = 2;

/** Every lease, in ms: no lock expires by itself during a test. */
export const LEASE_MS = 600_000;
/** The locked documents, in natural (insertion) order. */
export const DOC_IDS = ['a', 'b'] as const;

/** How a tag treats the others (README "Relationships"): read waits for writers; a writer is alone and asserts over readers. */
export interface Rule {
  readonly cooperative: readonly Tag[];
  readonly assertive: readonly Tag[];
  /** Cooperative with itself: an acquisition replaces its array. */
  readonly exclusive: boolean;
  /** A semaphore: the most permits its live entries may hold. */
  readonly limit?: number;
}

export const RULES: Readonly<Record<LockKind, Partial<Record<Tag, Rule>>>> = {
  writeLock: { write: { cooperative: ['write'], assertive: [], exclusive: true } },
  multiLock: {
    read: { cooperative: ['write'], assertive: [], exclusive: false },
    write: { cooperative: ['write'], assertive: ['read'], exclusive: true },
  },
  semaphore: { permit: { cooperative: [], assertive: [], exclusive: false, limit: PERMIT_LIMIT } },
};

export function kindOf(owner: Owner): LockKind {
  return owner === 'writeLock' || owner === 'fairWriteLock' ? 'writeLock' : owner === 'semaphore' ? 'semaphore' : 'multiLock';
}

/** The lock objects whose calls go through the faulty collection. */
export function faultable(owner: Owner): boolean {
  return owner === 'writeLock' || owner === 'multiLock' || owner === 'semaphore';
}

export function ruleOf(kind: LockKind, tag: Tag): Rule {
  const rule = RULES[kind][tag];
  if (!rule) throw new Error(`${kind} has no tag ${tag}`);
  return rule;
}

export function tagsOf(kind: LockKind): Tag[] {
  return Object.keys(RULES[kind]) as Tag[];
}

export interface Entry {
  readonly id: string;
  exp: number;
  /** A semaphore's holder: the permits it holds. */
  readonly permits?: number;
}

export interface Ticket {
  readonly id: string;
  readonly tag: Tag;
}

/** One locked document: its fencing counter, the balance commits change, the entries per tag and the fair queue. */
export interface DocState {
  readonly id: string;
  fence: number;
  balance: number;
  readonly tags: Record<Tag, Entry[]>;
  queue: Ticket[];
}

/** A lock a call handed out: a handle, the `err.lock` of `AssertiveLock`, or the unconfirmed `err.lock` of a lost acquisition. */
export interface ModelHandle {
  readonly key: number;
  readonly owner: Owner;
  /** Its tag (a conversion changes it). */
  tag: Tag;
  /** The document it was written to (undefined: an unconfirmed lock that never landed). */
  readonly doc: string | undefined;
  readonly id: string;
  /** Its fencing token (a conversion takes a new one). */
  fence: number;
  /** A lost acquisition's `err.lock`: addressed by its id alone, and releasing it succeeds when it is not held. */
  readonly unconfirmed: boolean;
}

/** A fair waiter that holds a ticket in a document's queue. */
export interface Waiter {
  readonly owner: 'fairWriteLock' | 'fairMultiLock';
  readonly tag: Tag;
  readonly doc: string;
  readonly ticket: string;
}

/** How a call settles: resolved (an acquisition's handle with its fence), or a rejection. */
export type Expected =
  | { readonly status: 'resolved'; readonly fence?: number }
  | { readonly status: 'rejected'; readonly subtype: Subtype; readonly lock?: { readonly fence: number }; readonly applied?: boolean | 'unknown' };

/** An operation's expected outcome, and the lock it hands out (registered in {@link ProtocolModel.handles}). */
export interface Step {
  readonly expected: Expected;
  readonly handle?: ModelHandle;
}

export const rejected = (subtype: Subtype, more: { lock?: { fence: number }; applied?: boolean | 'unknown' } = {}): Expected => ({ status: 'rejected', subtype, ...more });
