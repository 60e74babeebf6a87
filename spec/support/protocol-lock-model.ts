/**
 * The document-lock operations of the protocol model (spec/support/protocol-model.ts), without fair
 * waiters: what each call answers and what it leaves in the stored lock.
 */
import {
  DOC_IDS,
  kindOf,
  LEASE_MS,
  rejected,
  ruleOf,
  tagsOf,
  type DocState,
  type Entry,
  type Fault,
  type LockKind,
  type ModelHandle,
  type Owner,
  type Step,
  type Subtype,
  type Tag,
  type Target,
} from './protocol-rules';

/** The model's documents and the locks it handed out, and each document-lock operation on them. */
export class LockModel {
  /** The server's clock (model ms): one tick per operation. */
  clock = 1;
  readonly docs = new Map<string, DocState>();
  readonly handles: ModelHandle[] = [];
  /** Set when an outcome could not be known (the machine was too slow for a settling step): the sequence stops there. */
  halted: string | undefined;
  /** Told when a lost acquisition's write has landed, before monglock releases it in the background: a state a failover can return to. */
  onLanded: (() => void) | undefined;

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
        this.onLanded?.();
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

  /** An acquisition's write lands in `doc`. */
  protected land(doc: DocState, kind: LockKind, tag: Tag, id: string, options: { pruneOwn: boolean; permits?: number }): void {
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

  protected register(handle: Omit<ModelHandle, 'key'>): ModelHandle {
    const registered = { ...handle, key: this.handles.length };
    this.handles.push(registered);
    return registered;
  }
}
