/**
 * A replica set's failover with rollback, simulated on one server at the place where it arises
 * (test infrastructure; no replica set runs on these machines).
 *
 * On a replica set, a write acknowledged at `w: 'majority'` is on a majority of members, and so is
 * every write before it in the primary's oplog (the oplog is replicated in order); a write sent with
 * any `w` (also a refused or no-op one) waits for that point. Writes after the last such point,
 * acknowledged by the primary alone (`w: 1`), may be on no other member: a failover elects one
 * of those, and the old primary rolls them back. {@link ReplicaSet} serializes the writes of its
 * collection (the server applies them one at a time), keeps the watched documents as they were
 * right after the last write sent at majority (the majority commit point), and {@link ReplicaSet.failover}
 * puts them back to that state: every later write is lost, the worst a rollback can do.
 *
 * Time is not rolled back: an expiry the test applies (an entry's `exp` moved into the past) is
 * applied to the committed state too. An election takes longer (10 s by default) than a fair
 * ticket's lease (2 s), so the tickets of the old primary's state have expired by then: the restored
 * documents keep none (a failover is only simulated while nobody waits with one).
 */
import type { Collection, Document } from 'mongodb';

const WRITES = new Set(['findOneAndUpdate', 'findOneAndDelete', 'findOneAndReplace', 'updateOne', 'updateMany', 'replaceOne', 'deleteOne', 'deleteMany', 'insertOne', 'insertMany', 'bulkWrite']);

/** True when a driver write's options (its last argument that has them) ask for `w: 'majority'`. */
function sentAtMajority(args: readonly unknown[]): boolean {
  const options = [...args].reverse().find((arg) => typeof arg === 'object' && arg !== null && 'writeConcern' in arg) as { writeConcern?: { w?: unknown } } | undefined;
  return options?.writeConcern?.w === 'majority';
}

/** One collection of a simulated replica set, whose documents `ids` are rolled back at a failover. */
export class ReplicaSet {
  /** The collection as the clients see it: its writes serialized and watched. */
  readonly collection: Collection<Document>;
  /** Writes seen, by write concern, and failovers that lost at least one write. */
  readonly counts = { majority: 0, other: 0, failovers: 0, rollbacks: 0 };
  #queue: Promise<unknown> = Promise.resolve();
  #committed = new Map<unknown, Document | undefined>();
  /** Whether a write after the commit point was applied (a failover then loses something). */
  #dirty = false;

  private constructor(
    private readonly raw: Collection<Document>,
    private readonly ids: readonly unknown[],
  ) {
    this.collection = new Proxy(raw, {
      get: (target, property, receiver) => {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        const method = String(property);
        if (!WRITES.has(method)) return (value as (...a: unknown[]) => unknown).bind(target);
        return (...args: unknown[]) =>
          this.exclusive(async () => {
            const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            if (sentAtMajority(args)) {
              this.counts.majority++;
              await this.commit();
            } else {
              this.counts.other++;
              this.#dirty = true;
            }
            return result;
          });
      },
    });
  }

  /** `raw` as one collection of a replica set whose documents `ids` are committed as they are now. */
  static async over(raw: Collection<Document>, ids: readonly unknown[]): Promise<ReplicaSet> {
    const set = new ReplicaSet(raw, ids);
    await set.commit();
    return set;
  }

  /** Runs `fn` while no write is applied (the server's writes are serialized through this queue). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /**
   * The failover: the watched documents go back to the majority commit point, without their fair
   * tickets (expired during the election), and that state is committed. Resolves whether a write
   * was lost.
   */
  failover(): Promise<boolean> {
    return this.exclusive(async () => {
      const lost = this.#dirty;
      for (const id of this.ids) {
        const doc = this.#committed.get(id);
        if (doc) await this.raw.replaceOne({ _id: id } as Document, withoutTickets(doc));
        else await this.raw.deleteOne({ _id: id } as Document);
      }
      this.counts.failovers++;
      if (lost) this.counts.rollbacks++;
      await this.commit();
      return lost;
    });
  }

  /**
   * Time passing for an entry (`tag`'s lock `id` in document `docId`): `move` updates the stored
   * document (it runs while no write is applied), and the committed state gets the same change.
   */
  expire(docId: unknown, change: (doc: Document) => void, move: () => Promise<void>): Promise<void> {
    return this.exclusive(async () => {
      await move();
      const committed = this.#committed.get(docId);
      if (committed) change(committed);
    });
  }

  private async commit(): Promise<void> {
    const docs = await this.raw.find({ _id: { $in: [...this.ids] } } as Document).toArray();
    this.#committed = new Map(this.ids.map((id) => [id, docs.find((doc) => doc._id === id)]));
    this.#dirty = false;
  }
}

/** A stored document without the tickets of its fair queue. */
function withoutTickets(doc: Document): Document {
  const lock = doc.lock as Document | undefined;
  if (!lock?.queue) return doc;
  return { ...doc, lock: Object.fromEntries(Object.entries(lock).filter(([key]) => key !== 'queue')) };
}
