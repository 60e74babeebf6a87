/**
 * Failovers with rollback in the protocol model test (spec/protocol/protocol-model.spec.ts).
 *
 * The real side runs on a simulated replica set (spec/support/replica-set.ts): a failover puts the
 * documents back to the last majority commit point, losing every later write that the primary
 * alone acknowledged (plain releases and forced releases at `releaseW` 1, acquisitions sent with
 * `w: 1`, fair tickets). Which writes those were depends on what the library sent at which write
 * concern, also in the background: the model does not guess it. It keeps a {@link RollbackJournal}
 * of its states, one after each write it models, and knows which of them a majority has for sure
 * (the caller was answered by a write at majority after them: a resolved acquisition, commit,
 * extension, continuation or conversion, a settled commit, a fair waiter that won). After a
 * failover the documents must be in one of the states from that point on (a rollback can lose
 * nothing the majority has, and brings back nothing that was never written), and the model goes on
 * from that state. A lock whose acquisition the rollback lost is noted: its fencing token may be
 * issued again (docs/guarantees.md, "Write concerns"); no other token ever is.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import type { Observed, Real } from './protocol-harness';
import { DOC_IDS, type DocState, type ProtocolModel, type Tag } from './protocol-model';

/** A document as the model test compares it: fence, balance, entries per tag (live or expired), the fair queue. */
export interface DocView {
  readonly fence: number;
  readonly balance: unknown;
  readonly read: string[];
  readonly write: string[];
  readonly permit: string[];
  readonly queue: string[];
}

/** The view of a stored document at local time `now`. */
export function storedView(doc: Document | undefined, now: number): DocView {
  const lock = (doc?.lock ?? {}) as { fence?: number; tags?: Record<string, Array<{ id: string; exp: Date }>>; queue?: Array<{ id: string; tag: string }> };
  const entries = (tag: Tag): string[] => (lock.tags?.[tag] ?? []).map((entry) => `${entry.id}:${entry.exp.getTime() > now ? 'live' : 'expired'}`).sort();
  return { fence: lock.fence ?? 0, balance: doc?.balance, read: entries('read'), write: entries('write'), permit: entries('permit'), queue: (lock.queue ?? []).map((ticket) => `${ticket.tag}:${ticket.id}`).sort() };
}

/** The view of the model's document `doc`. */
export function modelView(model: ProtocolModel, doc: DocState): DocView {
  const entries = (tag: Tag): string[] => doc.tags[tag].map((entry) => `${entry.id}:${model.live(entry) ? 'live' : 'expired'}`).sort();
  return { fence: doc.fence, balance: doc.balance, read: entries('read'), write: entries('write'), permit: entries('permit'), queue: doc.queue.map((ticket) => `${ticket.tag}:${ticket.id}`).sort() };
}

/** A copy of `doc` that later changes to the model leave alone. */
function cloneDoc(doc: DocState): DocState {
  return { ...doc, tags: { read: doc.tags.read.map((entry) => ({ ...entry })), write: doc.tags.write.map((entry) => ({ ...entry })), permit: doc.tags.permit.map((entry) => ({ ...entry })) }, queue: [...doc.queue] };
}

/** One state of the model's documents, after one modelled write. */
interface Mark {
  readonly docs: Map<string, DocState>;
  /** How many locks the model had handed out then: the later ones were acquired after it. */
  readonly handles: number;
  readonly what: string;
}

/** The model's states since the last one a majority has for sure. */
export class RollbackJournal {
  #marks: Mark[] = [];
  /** Handles whose acquisition a failover rolled back (their tokens may be issued again). */
  readonly rolledBack = new Set<number>();

  /** Records the model's state now; `durable`: a write at majority after it answered its caller, so every earlier state is dropped. */
  mark(model: ProtocolModel, what: string, durable = false): void {
    const mark = { docs: new Map([...model.docs].map(([id, doc]) => [id, cloneDoc(doc)])), handles: model.handles.length, what };
    this.#marks = durable || this.#marks.length === 0 ? [mark] : [...this.#marks, mark];
  }

  /** Time passing: an entry's expiry moved in every recorded state too. */
  expire(docId: string, tag: Tag, id: string, exp: number): void {
    for (const mark of this.#marks) {
      const entry = mark.docs.get(docId)?.tags[tag].find((candidate) => candidate.id === id);
      if (entry) entry.exp = exp;
    }
  }

  /**
   * After a failover that left the documents in `stored` (by `_id`): the latest recorded state
   * they match (fails when none does), which the model adopts, without fair tickets (expired in
   * the election). Handles acquired after it were rolled back.
   */
  adopt(model: ProtocolModel, stored: ReadonlyMap<string, Document | undefined>, now: number): string {
    const real = DOC_IDS.map((id) => ({ ...storedView(stored.get(id), now), queue: [] }));
    const matches = (mark: Mark): boolean => DOC_IDS.every((id, i) => JSON.stringify({ ...modelView(model, mark.docs.get(id)!), queue: [] }) === JSON.stringify(real[i]));
    const at = lastIndexWhere(this.#marks, matches);
    const allowed = this.#marks.map((mark) => `${mark.what}: ${JSON.stringify(DOC_IDS.map((id) => modelView(model, mark.docs.get(id)!)))}`);
    expect(at, `after the failover the documents are ${JSON.stringify(real)}: none of the states a rollback may leave (the earliest holds every write a majority acknowledged):\n${allowed.join('\n')}`).to.be.at.least(0);
    const mark = this.#marks[at]!;
    const liveBefore = new Set(model.liveEntries().map((entry) => entry.id));
    for (const [id, doc] of mark.docs) model.docs.set(id, { ...cloneDoc(doc), queue: [] });
    rollbackStats.heldAgain += model.liveEntries().filter((entry) => !liveBefore.has(entry.id)).length;
    for (const handle of model.handles.slice(mark.handles)) if (!handle.unconfirmed) this.rolledBack.add(handle.key);
    this.mark(model, `the failover back to "${mark.what}"`, true);
    return mark.what;
  }
}

const journals = new WeakMap<ProtocolModel, RollbackJournal>();

/** The journal of `model`'s states (made on first use). */
export function journalOf(model: ProtocolModel): RollbackJournal {
  let journal = journals.get(model);
  if (!journal) journals.set(model, (journal = new RollbackJournal()));
  return journal;
}

/**
 * The fencing property a rollback leaves: the locks the model handed out whose acquisition was not
 * rolled back hold tokens no other such lock of their document holds (a token is issued once).
 */
export function checkFences(model: ProtocolModel, real: Real, after: string): void {
  const seen = new Map<string, number>();
  const rolledBack = journalOf(model).rolledBack;
  for (const handle of model.handles) {
    if (handle.unconfirmed || handle.doc === undefined || rolledBack.has(handle.key)) continue;
    const fence = real.handles[handle.key]?.fence ?? handle.fence;
    const key = `${handle.doc}:${fence}`;
    expect(seen.get(key), `after ${after}: h${handle.key} holds the token ${fence} of ${handle.doc}, issued before to h${seen.get(key)}`).to.equal(undefined);
    seen.set(key, handle.key);
  }
}

/**
 * True when the call's outcome proves that a write of it at majority answered it (it resolved, or
 * was refused with `subtype` after its write): every state before is then on a majority.
 */
export function answeredAtMajority(observed: Observed, subtype?: string): boolean {
  return observed.status === 'resolved' || (subtype !== undefined && observed.error?.subtype === subtype);
}

/** Counts over the whole run, for the report. */
export const rollbackStats = { failovers: 0, lostWrites: 0, rolledBackLocks: 0, heldAgain: 0 };

function lastIndexWhere<T>(items: readonly T[], test: (item: T) => boolean): number {
  for (let i = items.length - 1; i >= 0; i--) if (test(items[i]!)) return i;
  return -1;
}
