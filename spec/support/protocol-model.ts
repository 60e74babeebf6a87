/**
 * An executable model of the document-lock protocol, in plain TypeScript (no MongoDB): what each
 * operation of writeLock and multiLock answers and what it leaves in the stored lock, as README
 * ("Relationships", "Stored format", "Fair mode", "Read-modify-write", "Errors") states it.
 * spec/protocol/protocol-model.spec.ts runs random sequences against the real library and this
 * model side by side.
 *
 * Time: `clock` is the server's clock in model ms. Every lease is {@link LEASE_MS}, far longer than
 * a test, so an entry expires only when a test moves its `exp` into the past ({@link ProtocolModel.expire}).
 * Lock ids are random in the library: the model is told the id the library issued and records it.
 * The vocabulary is in protocol-rules.ts, the document-lock operations in protocol-lock-model.ts,
 * the fair waiters here.
 */
import { LockModel } from './protocol-lock-model';
import { kindOf, type Step, type Tag, type Waiter } from './protocol-rules';

export * from './protocol-rules';

/** The model: the document-lock operations (protocol-lock-model.ts) and the fair waiters in the background. */
export class ProtocolModel extends LockModel {
  /** Fair waiters in the background, in ticket order. */
  waiters: Waiter[] = [];

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
}
