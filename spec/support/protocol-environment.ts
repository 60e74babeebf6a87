/**
 * The commands of the protocol model test that do not call the locks under test: the server's
 * clock passing an entry's expiry, another client's fair waiter, and a replica set's failover with
 * rollback (spec/support/protocol-rollback.ts). Each checks the real library against the model
 * (spec/support/protocol-model.ts) afterwards, as every command does.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { sleep } from './fixture';
import type { Command } from './protocol-commands';
import { afterCommand, EXPIRED_BY, observe, stats, type Real, type RealWaiter } from './protocol-harness';
import { DOC_IDS, type ProtocolModel, type Tag, type Waiter } from './protocol-model';
import { biased } from './protocol-picks';
import { journalOf, rollbackStats } from './protocol-rollback';

/** The stored lock of a document, as Expire reads and moves it. */
type StoredLock = { fence?: number; tags?: Record<string, Array<{ id: string; exp: Date }>>; queue?: Array<{ exp: Date }> };

/** `lock` with the entry `id` of `tag` expired at `past`, and `until` down to the latest expiry left. */
function expireIn(lock: Document, tag: Tag, id: string, past: Date): void {
  const stored = lock as StoredLock & { until?: Date };
  const entry = stored.tags?.[tag]?.find((candidate) => candidate.id === id);
  if (!entry) return;
  entry.exp = past;
  const others = [...Object.values(stored.tags ?? {}).flat().filter((other) => other.id !== id), ...(stored.queue ?? [])].map((item) => item.exp.getTime());
  stored.until = new Date(Math.max(past.getTime(), ...others));
}

/** The server's clock passes a live entry's expiry: its `exp` is moved into the past, and `until` down to the latest expiry left (in the committed state of the replica set too: time is not rolled back). */
export class Expire implements Command {
  constructor(readonly pick: number) {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && model.liveEntries().length > 0;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    // Oldest lock first (by when it was handed out), so that the bias favours the latest.
    const age = (id: string): number => model.handles.findIndex((handle) => handle.id === id);
    const chosen = biased([...model.liveEntries()].sort((x, y) => age(x.id) - age(y.id)), this.pick)!;
    const what = `expire(${chosen.tag} ${chosen.id.slice(0, 6)} in ${chosen.doc})`;
    const past = new Date(Date.now() - EXPIRED_BY);
    // One update, while no other write is applied: a fair waiter this expiry unblocks may acquire right after, and `until` must still cover it.
    const move = async (): Promise<void> => {
      const doc = await real.raw.findOne({ _id: chosen.doc as never });
      const lock = (doc?.lock ?? {}) as StoredLock;
      const others = [...Object.values(lock.tags ?? {}).flat().filter((entry) => entry.id !== chosen.id), ...(lock.queue ?? [])].map((item) => item.exp.getTime());
      const moved = await real.raw.updateOne(
        { _id: chosen.doc as never, 'lock.fence': lock.fence, [`lock.tags.${chosen.tag}.id`]: chosen.id },
        { $set: { [`lock.tags.${chosen.tag}.$[expiring].exp`]: past, 'lock.until': new Date(Math.max(past.getTime(), ...others)) } },
        { arrayFilters: [{ 'expiring.id': chosen.id }] },
      );
      expect(moved.modifiedCount, `${what}: the entry is stored`).to.equal(1);
    };
    await real.replica.expire(chosen.doc, (committed) => expireIn(committed.lock ?? {}, chosen.tag, chosen.id, past), move);
    model.expire(chosen.doc, chosen.tag, chosen.id);
    const exp = model.doc(chosen.doc).tags[chosen.tag].find((entry) => entry.id === chosen.id)!.exp;
    journalOf(model).expire(chosen.doc, chosen.tag, chosen.id, exp);
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `expire(#${this.pick})`;
  }
}

/**
 * A fair acquisition with `wait` on a blocked document, from another lock object (another client):
 * it queues with a ticket and waits in the background. Its ticket must come last in the queue (a
 * lagging clock could stamp it before an earlier waiter's): otherwise it is aborted, and the
 * command does nothing.
 */
export class StartWaiter implements Command {
  constructor(
    readonly owner: Waiter['owner'],
    readonly doc: 'a' | 'b',
  ) {}

  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && model.waiters.length < 3 && model.mayStartWaiter(this.owner, this.doc);
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const what = this.toString();
    const controller = new AbortController();
    const params = { ...(this.owner === 'fairMultiLock' ? { tag: 'read' } : {}), wait: 120_000, signal: controller.signal };
    const waiting: RealWaiter = {
      promise: observe(real.locks[this.owner].acquire({ _id: this.doc }, params)).then((observed) => {
        waiting.settled = true;
        return observed;
      }),
      settled: false,
      controller,
    };
    const known = new Set(model.doc(this.doc).queue.map((ticket) => ticket.id));
    const { ticket, last } = await newTicket(real, this.doc, known, `${what}: the waiter's ticket`);
    expect(waiting.settled, `${what}: the waiter waits`).to.equal(false);
    if (!last) {
      stats.waitersReordered++;
      controller.abort(new Error('ticket out of order'));
      await waiting.promise;
    } else {
      real.waiters.set(ticket, waiting);
      model.startWaiter(this.owner, this.doc, ticket);
    }
    await afterCommand(model, real, what);
  }

  toString(): string {
    return `startFairWaiter(${this.owner === 'fairWriteLock' ? 'writeLock write' : 'multiLock read'} on ${this.doc}, wait)`;
  }
}

/** The id of the ticket in `doc`'s queue that is not `known`, once there, and whether it is ordered after all the others (by stamp, then id). */
export async function newTicket(real: Real, doc: string, known: ReadonlySet<string>, what: string): Promise<{ ticket: string; last: boolean }> {
  const until = Date.now() + 8_000;
  for (;;) {
    const stored = await real.raw.findOne({ _id: doc as never });
    const queue = (stored?.lock?.queue ?? []) as Array<{ id: string; at: Date }>;
    const mine = queue.find((ticket) => !known.has(ticket.id));
    if (mine) {
      const last = queue.every((ticket) => ticket === mine || ticket.at.getTime() < mine.at.getTime() || (ticket.at.getTime() === mine.at.getTime() && ticket.id < mine.id));
      return { ticket: mine.id, last };
    }
    if (Date.now() > until) throw new Error(`${what} did not appear within 8 s`);
    await sleep(10);
  }
}

/**
 * A replica set's failover with rollback, while no fair waiter waits: the documents go back to the
 * majority commit point (spec/support/replica-set.ts); they must then be in a state the model
 * allows (spec/support/protocol-rollback.ts), which it adopts, and every later step is checked
 * from there: a release rolled back leaves its lock held until its lease ends, a lock acquired at
 * `w: 1` and rolled back is gone (its commit writes nothing), a commit that resolved stays.
 */
export class Failover implements Command {
  check(model: Readonly<ProtocolModel>): boolean {
    return model.halted === undefined && model.waiters.length === 0;
  }

  async run(model: ProtocolModel, real: Real): Promise<void> {
    const lost = await real.replica.failover();
    const stored = await real.raw.find({ _id: { $in: [...DOC_IDS] as never[] } }).toArray();
    const journal = journalOf(model);
    const before = journal.rolledBack.size;
    const back = journal.adopt(model, new Map(stored.map((doc) => [doc._id as unknown as string, doc])), Date.now());
    rollbackStats.failovers++;
    if (lost) rollbackStats.lostWrites++;
    rollbackStats.rolledBackLocks += journal.rolledBack.size - before;
    await afterCommand(model, real, `failover (back to the state after ${back})`);
  }

  toString(): string {
    return 'failover()';
  }
}
