/**
 * An executable model of the document-lock protocol, in plain TypeScript (no MongoDB): what each
 * operation of writeLock and multiLock answers and what it leaves in the stored lock, as README
 * ("Relationships", "Stored format", "Fair mode", "Read-modify-write", "Errors") states it.
 * spec/system/protocol-model.spec.ts runs random sequences against the real library and this
 * model side by side.
 *
 * Time: `clock` is the server's clock in model ms. Every lease is {@link LEASE_MS}, far longer than
 * a test, so an entry expires only when a test moves its `exp` into the past ({@link ProtocolModel.expire}).
 * Lock ids are random in the library: the model is told the id the library issued and records it.
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

function ruleOf(kind: LockKind, tag: Tag): Rule {
  const rule = RULES[kind][tag];
  if (!rule) throw new Error(`${kind} has no tag ${tag}`);
  return rule;
}

function tagsOf(kind: LockKind): Tag[] {
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

const rejected = (subtype: Subtype, more: { lock?: { fence: number }; applied?: boolean | 'unknown' } = {}): Expected => ({ status: 'rejected', subtype, ...more });

export class ProtocolModel {
  /** The server's clock (model ms): one tick per operation. */
  clock = 1;
  readonly docs = new Map<string, DocState>();
  readonly handles: ModelHandle[] = [];
  /** Fair waiters in the background, in ticket order. */
  waiters: Waiter[] = [];
  /** Set when an outcome could not be known (the machine was too slow for a settling step): the sequence stops there. */
  halted: string | undefined;

  constructor(balance: number) {
    for (const id of DOC_IDS) this.docs.set(id, { id, fence: 0, balance, tags: { read: [], write: [], permit: [] }, queue: [] });
  }

  /** Unexpired by the server's clock. */
  live(entry: Entry): boolean {
    return entry.exp > this.clock;
  }

  /** The unexpired entries of `tag` in `doc`. */
  holders(doc: DocState, tag: Tag): Entry[] {
    return doc.tags[tag].filter((entry) => this.live(entry));
  }

  doc(id: string): DocState {
    const doc = this.docs.get(id);
    if (!doc) throw new Error(`no document ${id}`);
    return doc;
  }

  /**
   * True while `kind`'s `tag` cannot be acquired in `doc`: a live lock of a tag it is cooperative
   * with, or (fair calls) a live ticket of such a tag that came before its own (`ownTicket`; a
   * newcomer without one queues behind every waiter).
   */
  blocked(kind: LockKind, tag: Tag, doc: DocState, fair: boolean, ownTicket?: string, permits = 1): boolean {
    const rule = ruleOf(kind, tag);
    if (rule.cooperative.some((other) => this.holders(doc, other).length > 0)) return true;
    if (rule.limit !== undefined && this.holders(doc, tag).reduce((sum, entry) => sum + (entry.permits ?? 1), 0) + permits > rule.limit) return true;
    const mine = ownTicket === undefined ? -1 : doc.queue.findIndex((ticket) => ticket.id === ownTicket);
    const earlier = mine < 0 ? doc.queue : doc.queue.slice(0, mine);
    return fair && rule.cooperative.length > 0 && earlier.some((ticket) => rule.cooperative.includes(ticket.tag));
  }

  /**
   * acquire (writeLock, or multiLock with `{ tag }`, `wait: 0`): the first document of `target`
   * that is not blocked gets the entry (+1 fence; an exclusive tag's array replaced; expired
   * entries of the kind's other tags pruned; a shared tag's own expired entries pruned by a second
   * update once the reply shows them). Then it resolves, or, when a tag it asserts over is live,
   * rejects `AssertiveLock` carrying the registered lock. None matches: `RessourceNotFound`; all
   * blocked: `LockAlreadyTaken` (writeLock) or `CooperativeLock` (multiLock), nothing written.
   * A lost request or reply: `DbError` with an unconfirmed `err.lock` (fence 0); after a lost
   * reply the write landed (if it could), and monglock releases that lock in the background.
   */
  acquire(owner: Owner, tag: Tag, target: Target, fair: boolean, fault: Fault, issued: string | undefined, permits = 1): Step {
    this.clock++;
    const kind = kindOf(owner);
    const rule = ruleOf(kind, tag);
    const candidates = target === 'any' ? DOC_IDS.map((id) => this.doc(id)) : target === 'missing' ? [] : [this.doc(target)];
    const doc = candidates.find((candidate) => !this.blocked(kind, tag, candidate, fair, undefined, permits));
    const held = rule.limit === undefined ? {} : { permits };
    const id = issued ?? '<no id issued>';
    if (fault !== 'none') {
      if (fault === 'lostReply' && doc) {
        this.land(doc, kind, tag, id, { pruneOwn: false, ...held });
        this.remove(doc, tag, id); // the background release of err.lock
      }
      const handle = this.register({ owner, tag, doc: fault === 'lostReply' ? doc?.id : undefined, id, fence: 0, unconfirmed: true });
      return { expected: rejected('DbError', { lock: { fence: 0 } }), handle };
    }
    if (candidates.length === 0) return { expected: rejected('RessourceNotFound') };
    if (!doc) return { expected: rejected(kind === 'writeLock' ? 'LockAlreadyTaken' : kind === 'semaphore' ? 'SemaphoreFull' : 'CooperativeLock') };
    this.land(doc, kind, tag, id, { pruneOwn: true, ...held });
    const handle = this.register({ owner, tag, doc: doc.id, id, fence: doc.fence, unconfirmed: false });
    const pending = rule.assertive.some((other) => this.holders(doc, other).length > 0);
    return { expected: pending ? rejected('AssertiveLock', { lock: { fence: doc.fence } }) : { status: 'resolved', fence: doc.fence }, handle };
  }

  /**
   * acquire(filter, { lock }) (multiLock): continues a registration while its entry is live, pruning
   * expired entries of every tag; resolves (the same lock, its fence) once no tag it asserts over
   * is live, else `AssertiveLock` again. A lock that expired or is gone: `LockNotFound`. A lost
   * request or reply: `DbError` without a lock (the continuation writes no lock; after a lost reply
   * its pruning landed).
   */
  continueLock(handle: ModelHandle, fault: Fault): Step {
    this.clock++;
    const kind = kindOf(handle.owner);
    const doc = this.doc(handle.doc ?? DOC_IDS[0]);
    const own = doc.tags[handle.tag].find((entry) => entry.id === handle.id);
    const matches = own !== undefined && this.live(own);
    if (matches && fault !== 'lostRequest') for (const tag of tagsOf(kind)) this.pruneExpired(doc, tag);
    if (fault !== 'none') return { expected: rejected('DbError') };
    if (!matches) return { expected: rejected('LockNotFound') };
    const pending = ruleOf(kind, handle.tag).assertive.some((other) => this.holders(doc, other).length > 0);
    return { expected: pending ? rejected('AssertiveLock', { lock: { fence: handle.fence } }) : { status: 'resolved', fence: handle.fence } };
  }

  /**
   * release(filter, { lock }) / handle.release(): removes exactly that entry, also expired, and
   * resolves. Not there: `LockWasReacquired` for a writeLock whose document has issued a later
   * fence, else `LockNotFound` (an unconfirmed `err.lock` released by its handle resolves). A lost
   * reply: `DbError`, the entry removed; a lost request: `DbError`, nothing removed.
   */
  release(handle: ModelHandle, viaHandle: boolean, fault: Fault): Step {
    this.clock++;
    const doc = this.docHolding(handle);
    const own = doc?.tags[handle.tag].find((entry) => entry.id === handle.id);
    if (fault !== 'none') {
      if (fault === 'lostReply' && doc && own) this.remove(doc, handle.tag, handle.id);
      return { expected: rejected('DbError') };
    }
    if (doc && own) {
      this.remove(doc, handle.tag, handle.id);
      return { expected: { status: 'resolved' } };
    }
    if (handle.unconfirmed && viaHandle) return { expected: { status: 'resolved' } };
    return { expected: rejected(this.lostSubtype(handle)) };
  }

  /**
   * Commit (`release({ update })`): applies the update (`balance += amount`) and removes the entry
   * in one write, only while the entry is live and no tag it asserts over is live. Otherwise
   * nothing is written: `AssertiveLock` (live, still asserting), `LockNotFound` (expired or gone),
   * `LockWasReacquired` (writeLock, gone, a later fence issued). A lost reply or request is settled:
   * resolved if the commit landed; otherwise `DbError` with `data.applied: false`, and the entry
   * (if still there) removed by the settlement, so that the commit can never land later; but
   * `'unknown'` for an unconfirmed `err.lock` found in no document: its document is not known, so
   * an evicted record cannot be ruled out.
   */
  commit(handle: ModelHandle, amount: number, fault: Fault): Step {
    this.clock++;
    const doc = this.docHolding(handle);
    const own = doc?.tags[handle.tag].find((entry) => entry.id === handle.id);
    const asserting = doc !== undefined && ruleOf(kindOf(handle.owner), handle.tag).assertive.some((other) => this.holders(doc, other).length > 0);
    const applies = doc !== undefined && own !== undefined && this.live(own) && !asserting;
    if (applies && fault !== 'lostRequest') {
      doc.balance += amount;
      this.remove(doc, handle.tag, handle.id);
      return { expected: { status: 'resolved' } };
    }
    if (fault !== 'none') {
      if (doc && own) this.remove(doc, handle.tag, handle.id);
      return { expected: rejected('DbError', { applied: handle.unconfirmed && !own ? 'unknown' : false }) };
    }
    if (own && this.live(own)) return { expected: rejected('AssertiveLock') };
    // Expired: LockNotFound, as for any expired lock (also while the tags it asserts over are held).
    return { expected: rejected(own ? 'LockNotFound' : this.lostSubtype(handle)) };
  }

  /**
   * extend: pushes a live entry's expiry to a lease from the server's now and prunes expired
   * entries of the kind's other tags; never re-creates a lost lock: `LockNotFound` (expired, or
   * gone), `LockWasReacquired` (writeLock, gone, a later fence issued). A lost reply: `DbError`,
   * the extension landed; a lost request: `DbError`, nothing changed.
   */
  extend(handle: ModelHandle, fault: Fault): Step {
    this.clock++;
    const kind = kindOf(handle.owner);
    const doc = this.docHolding(handle);
    const own = doc?.tags[handle.tag].find((entry) => entry.id === handle.id);
    const matches = doc !== undefined && own !== undefined && this.live(own);
    if (matches && fault !== 'lostRequest') {
      own.exp = this.clock + LEASE_MS;
      for (const tag of tagsOf(kind)) if (tag !== handle.tag) this.pruneExpired(doc, tag);
    }
    if (fault !== 'none') return { expected: rejected('DbError') };
    if (matches) return { expected: { status: 'resolved' } };
    return { expected: rejected(own ? 'LockNotFound' : this.lostSubtype(handle)) };
  }

  /**
   * handle.convert(to) (multiLock, no wait): moves a live entry from its tag to `to` in one write
   * (same id, +1 fence, a new lease; an exclusive `to` replaces its array), only while no other
   * live entry of a tag `to` is cooperative with or asserts over is held. Refused, nothing written:
   * `UpgradeConflict` when one of those is a lock that asserts over the converting lock's tag (it
   * waits for it), else `CooperativeLock`. A lock that expired or is gone: `LockNotFound`.
   */
  convert(handle: ModelHandle, to: Tag): Step {
    this.clock++;
    const doc = this.docHolding(handle);
    const own = doc?.tags[handle.tag].find((entry) => entry.id === handle.id);
    if (!doc || !own || !this.live(own)) return { expected: rejected('LockNotFound') };
    const rule = ruleOf('multiLock', to);
    const held = [...new Set([...rule.cooperative, ...rule.assertive])].filter((tag) => this.holders(doc, tag).some((entry) => entry.id !== handle.id));
    if (held.some((tag) => ruleOf('multiLock', tag).assertive.includes(handle.tag))) return { expected: rejected('UpgradeConflict') };
    if (held.length > 0) return { expected: rejected('CooperativeLock') };
    this.remove(doc, handle.tag, handle.id);
    const entry = { id: handle.id, exp: this.clock + LEASE_MS };
    doc.tags[to] = rule.exclusive ? [entry] : [...doc.tags[to], entry];
    doc.fence++;
    handle.tag = to;
    handle.fence = doc.fence;
    return { expected: { status: 'resolved', fence: doc.fence } };
  }

  /** writeLock's forced release (no proof, monglock v2): empties the `write` array, whoever holds it. */
  forceRelease(target: 'a' | 'b' | 'missing'): Step {
    this.clock++;
    if (target === 'missing') return { expected: rejected('RessourceNotFound') };
    this.doc(target).tags.write = [];
    return { expected: { status: 'resolved' } };
  }

  /** The server's clock passes an entry's expiry (the test moves its `exp` into the past). */
  expire(docId: string, tag: Tag, id: string): void {
    this.clock++;
    const entry = this.doc(docId).tags[tag].find((candidate) => candidate.id === id);
    if (!entry) throw new Error(`no entry ${id} of ${tag} in ${docId}`);
    entry.exp = this.clock - 1;
  }

  /** The live entries, in a fixed order (documents, then tags, then array order): what `expire` picks from. */
  liveEntries(): Array<{ doc: string; tag: Tag; id: string }> {
    return DOC_IDS.flatMap((doc) => (['read', 'write'] as const).flatMap((tag) => this.holders(this.doc(doc), tag).map((entry) => ({ doc, tag, id: entry.id }))));
  }

  /** The tag a fair waiter of `owner` asks for: a writeLock's `write`, or the multiLock's `read`. */
  static waiterTag(owner: Waiter['owner']): Tag {
    return owner === 'fairWriteLock' ? 'write' : 'read';
  }

  /**
   * A fair waiter may join `docId` when the document is blocked for it. A writeLock waiter may not
   * queue behind a multiLock reader: a writeLock does not know `read`, so once the blocker goes
   * the two race (whichever lands first decides whether the reader wins), which no model can tell.
   */
  mayStartWaiter(owner: Waiter['owner'], docId: string): boolean {
    const doc = this.doc(docId);
    if (owner === 'fairWriteLock' && this.waiters.some((waiter) => waiter.doc === docId && waiter.owner === 'fairMultiLock')) return false;
    return this.blocked(kindOf(owner), ProtocolModel.waiterTag(owner), doc, true);
  }

  /**
   * A fair acquisition with `wait`, refused at once: it takes a ticket at the end of the document's
   * queue and waits. (The ticket's id is read from the document.)
   */
  startWaiter(owner: Waiter['owner'], docId: string, ticket: string): void {
    this.clock++;
    const tag = ProtocolModel.waiterTag(owner);
    this.doc(docId).queue.push({ id: ticket, tag });
    this.waiters.push({ owner, tag, doc: docId, ticket });
  }

  /** True when the waiter of `ticket` is not blocked (by locks, or by tickets before its own). */
  mayWin(ticket: string): boolean {
    const waiter = this.waiters.find((candidate) => candidate.ticket === ticket);
    return waiter !== undefined && !this.blocked(kindOf(waiter.owner), waiter.tag, this.doc(waiter.doc), true, waiter.ticket);
  }

  /**
   * The waiters that must win now: in ticket order, each one not blocked wins, and its lock is
   * counted before the next is judged. (Waiters that win together, readers, may land in any order.)
   */
  mustWin(): Waiter[] {
    const trial = new ProtocolModel(0);
    for (const [id, doc] of this.docs) trial.docs.set(id, { ...doc, tags: { read: [...doc.tags.read], write: [...doc.tags.write], permit: [...doc.tags.permit] }, queue: [...doc.queue] });
    trial.clock = this.clock;
    trial.waiters.push(...this.waiters);
    const winners: Waiter[] = [];
    for (const waiter of this.waiters) {
      if (!trial.mayWin(waiter.ticket)) continue;
      trial.waiterWon(waiter.ticket, `trial-${waiter.ticket}`);
      winners.push(waiter);
    }
    return winners;
  }

  /** A waiter wins: an acquisition as above that also takes its ticket out of the queue. */
  waiterWon(ticket: string, issued: string): Step {
    const waiter = this.waiters.find((candidate) => candidate.ticket === ticket);
    if (!waiter) throw new Error(`no waiter with ticket ${ticket}`);
    this.waiters = this.waiters.filter((other) => other !== waiter);
    const doc = this.doc(waiter.doc);
    doc.queue = doc.queue.filter((other) => other.id !== ticket);
    this.land(doc, kindOf(waiter.owner), waiter.tag, issued, { pruneOwn: true });
    const handle = this.register({ owner: waiter.owner, tag: waiter.tag, doc: doc.id, id: issued, fence: doc.fence, unconfirmed: false });
    return { expected: { status: 'resolved', fence: doc.fence }, handle };
  }

  /** A waiter's signal aborts: it rejects with the abort's reason and takes its ticket out. */
  waiterAborted(ticket: string): void {
    this.waiters = this.waiters.filter((waiter) => waiter.ticket !== ticket);
    for (const doc of this.docs.values()) doc.queue = doc.queue.filter((other) => other.id !== ticket);
  }

  /** An acquisition's write lands in `doc`. */
  private land(doc: DocState, kind: LockKind, tag: Tag, id: string, options: { pruneOwn: boolean; permits?: number }): void {
    const rule = ruleOf(kind, tag);
    doc.fence++;
    const entry = { id, exp: this.clock + LEASE_MS, ...(options.permits !== undefined && { permits: options.permits }) };
    if (rule.exclusive) doc.tags[tag] = [entry];
    else doc.tags[tag].push(entry);
    for (const other of tagsOf(kind)) if (other !== tag) this.pruneExpired(doc, other);
    if (!rule.exclusive && options.pruneOwn) this.pruneExpired(doc, tag);
  }

  private pruneExpired(doc: DocState, tag: Tag): void {
    doc.tags[tag] = doc.tags[tag].filter((entry) => this.live(entry));
  }

  private remove(doc: DocState, tag: Tag, id: string): void {
    doc.tags[tag] = doc.tags[tag].filter((entry) => entry.id !== id);
  }

  /** The document a handle's calls address: its own, or for an unconfirmed lock the one holding its id (else the first, which explains). */
  private docHolding(handle: ModelHandle): DocState | undefined {
    if (!handle.unconfirmed) return handle.doc === undefined ? undefined : this.doc(handle.doc);
    return DOC_IDS.map((id) => this.doc(id)).find((doc) => doc.tags[handle.tag].some((entry) => entry.id === handle.id));
  }

  /** Why a lock that is gone from its document was refused: taken over (writeLock, a later fence issued) or not found. */
  private lostSubtype(handle: ModelHandle): Subtype {
    const doc = handle.unconfirmed ? this.doc(DOC_IDS[0]) : this.doc(handle.doc ?? DOC_IDS[0]);
    return kindOf(handle.owner) === 'writeLock' && handle.fence > 0 && doc.fence > handle.fence ? 'LockWasReacquired' : 'LockNotFound';
  }

  private register(handle: Omit<ModelHandle, 'key'>): ModelHandle {
    const registered = { ...handle, key: this.handles.length };
    this.handles.push(registered);
    return registered;
  }
}
