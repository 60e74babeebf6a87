/**
 * The leases `using()` keeps are extended in batches: one bulk `update` (a statement per lock, each
 * the statement a single extension sends) and one read-back by `_id` per tick, instead of a
 * findAndModify per lock; each lock still no earlier than its half lease, and a lock the batch did
 * not extend is settled alone (reported lost by its own signal when it was taken away).
 */
import { expect } from 'chai';
import type { CommandStartedEvent, Document, MongoClient } from 'mongodb';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { isLockError, writeLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep, testDb } from '../support/fixture';
import { gate, isExtension, until } from '../support/lock-commands';

/** A client of its own whose commands are recorded (name, when, and the `_id`s each writes). */
async function monitoredClient(): Promise<{ client: MongoClient; sent: CommandStartedEvent[] }> {
  const client = await newClient({ monitorCommands: true });
  const sent: CommandStartedEvent[] = [];
  client.on('commandStarted', (event) => sent.push(event));
  return { client, sent };
}

/** The `_id`s an extension command writes: each statement's of a bulk `update`, a findAndModify's. */
function writtenIds(event: CommandStartedEvent): unknown[] {
  if (event.commandName === 'update') return (event.command.updates as Array<{ q: Document }>).map((statement) => statement.q._id);
  if (event.commandName === 'findAndModify') return [(event.command.query as Document)._id];
  return [];
}

function rle(events: CommandStartedEvent[]): string {
  const out: string[] = [];
  let last = '';
  let n = 0;
  for (const e of events) {
    const name = e.commandName + (e.commandName === 'update' ? String((e.command.updates as unknown[]).length) : '');
    if (name === last) n++;
    else {
      if (n) out.push(`${last}x${n}`);
      last = name;
      n = 1;
    }
  }
  out.push(`${last}x${n}`);
  return out.join(' ');
}

const LOCK_COMMANDS = new Set(['update', 'findAndModify', 'aggregate']);

interface Held {
  readonly id: number;
  readonly handle: LockHandle;
  readonly signal: AbortSignal;
  readonly lowest: number;
}

/** Acquisitions started at once: a crowd of them at once is another test (the command queue's), not this one's. */
const ACQUIRING = 50;

/**
 * `count` `using()` bodies on documents 0…count-1 (started {@link ACQUIRING} at a time), each held
 * `holdMs` once all started; resolves what each saw.
 */
async function holdAll(lock: ReturnType<typeof writeLock>, count: number, holdMs: number, during?: (all: Held[]) => Promise<void>, params: { timeout?: number } = {}): Promise<Array<Held | Error>> {
  let started = 0;
  let allStarted!: () => void;
  const everyone = new Promise<void>((resolve) => (allStarted = resolve));
  const held: Held[] = [];
  const arrived = (): void => {
    if (++started === count) allStarted();
  };
  const body = (id: number): Promise<Held | Error> =>
    lock
      .using({ _id: id }, params, async (handle, signal) => {
        arrived();
        await everyone;
        let lowest = Infinity;
        const end = Date.now() + holdMs;
        while (Date.now() < end && !signal.aborted) {
          lowest = Math.min(lowest, handle.remaining());
          await sleep(100);
        }
        const seen = { id, handle, signal, lowest };
        held.push(seen);
        return seen;
      })
      .then(
        (seen) => seen,
        (error: Error) => {
          if (!held.some((seen) => seen.id === id)) arrived();
          return error;
        },
      );
  const bodies: Array<Promise<Held | Error>> = [];
  for (let from = 0; from < count; from += ACQUIRING) {
    for (let id = from; id < Math.min(count, from + ACQUIRING); id++) bodies.push(body(id));
    await until(() => started >= Math.min(count, from + ACQUIRING), 30_000);
  }
  await everyone;
  await during?.(held);
  return Promise.all(bodies);
}

describe('leases kept in batches', function () {
  this.timeout(60_000);

  it('200 using() bodies are kept by a bulk update and a read-back per tick, each lock no earlier than its half lease, none lost', async () => {
    const lease = 2_000;
    const holdMs = 4_000;
    const docs = Array.from({ length: 200 }, (_, id) => ({ _id: id }));
    const { client, sent } = await monitoredClient();
    const named = await freshCollection(docs);
    const collection = client.db(testDb().databaseName).collection(named.collectionName);
    const lock = writeLock({ collection, locktimeout: lease });
    // The test server compiles its paths on first use: a round first, so that what is counted is the steady state.
    await holdAll(lock, docs.length, lease);
    let from = 0;
    let to = 0;
    const outcomes = await holdAll(lock, docs.length, holdMs, async () => {
      from = sent.length;
      await sleep(holdMs - 200);
      to = sent.length;
    });
    for (const outcome of outcomes) expect(outcome).not.to.be.instanceOf(Error);
    for (const held of outcomes as Held[]) {
      expect(held.signal.aborted, `lock ${held.id} lost: ${String(held.signal.reason)} ${rle(sent.slice(from, to))}`).to.equal(false);
      expect(held.lowest, `lock ${held.id}'s remaining()`).to.be.above(0);
    }
    const during = sent.slice(from, to).filter((event) => LOCK_COMMANDS.has(event.commandName));
    const bulks = during.filter((event) => event.commandName === "update");
    expect(bulks.length, 'bulk updates').to.be.above(0);
    expect(during.filter((event) => event.commandName === 'aggregate').length, 'a read-back per bulk').to.equal(bulks.length);
    const periods = (holdMs - 200) / lease;
    expect(during.length, `extension commands in ${periods.toFixed(1)} lease periods`).to.be.below((docs.length / 5) * periods);
    const writes = new Map<unknown, number>();
    for (const event of during) for (const id of writtenIds(event)) writes.set(id, (writes.get(id) ?? 0) + 1);
    const mostPerDocument = Math.max(...writes.values());
    expect(mostPerDocument, 'writes of one document').to.be.at.most(Math.ceil((holdMs - 200) / (lease / 2)) + 1);
  });

  it('locks taken away meanwhile (their entries removed) are reported lost by their own signal; the others of the batch keep theirs', async () => {
    const { client, sent } = await monitoredClient();
    const named = await freshCollection(Array.from({ length: 20 }, (_, id) => ({ _id: id })));
    const collection = client.db(testDb().databaseName).collection(named.collectionName);
    const lock = writeLock({ collection, locktimeout: 2_000 });
    const taken = [3, 7, 11, 15];
    const lost: Array<{ lockId: string; cause: string }> = [];
    const listener = (event: unknown): void => void lost.push(event as { lockId: string; cause: string });
    subscribe('monglock:lease-lost', listener);
    try {
      let seen: Held[] = [];
      await holdAll(lock, 20, 3_000, async (held) => {
        seen = held;
        // The CLI's forced release: the entry removed by an update of its own.
        await Promise.all(taken.map((id) => named.updateOne({ _id: id as never }, { $set: { 'lock.tags.write': [] } })));
      });
      // A body whose lock was lost ends, and its using() rejects (its release finds no lock): what it saw is kept here.
      const byId = new Map(seen.map((held) => [held.id, held]));
      for (let id = 0; id < 20; id++) {
        const held = byId.get(id);
        expect(held, `body ${id}`).not.to.equal(undefined);
        if (taken.includes(id)) {
          expect(held!.signal.aborted, `lock ${id} reported lost`).to.equal(true);
          expect(isLockError(held!.signal.reason, 'LockNotFound'), String(held!.signal.reason)).to.equal(true);
          expect(lost.filter((event) => event.lockId === held!.handle.id).map((event) => event.cause)).to.deep.equal(['refused']);
        } else {
          expect(held!.signal.aborted, `lock ${id} kept`).to.equal(false);
          expect(lost.some((event) => event.lockId === held!.handle.id)).to.equal(false);
        }
      }
      const batched = sent.filter((event) => event.commandName === 'update' && (event.command.updates as unknown[]).length > 1).flatMap(writtenIds);
      for (const id of taken) expect(batched, `lock ${id} was in a batch`).to.include(id);
    } finally {
      unsubscribe('monglock:lease-lost', listener);
    }
  });

  it('a bulk whose reply is lost is settled by the read-back: the locks it extended are kept, none held twice', async () => {
    const { client, sent } = await monitoredClient();
    const named = await freshCollection(Array.from({ length: 20 }, (_, id) => ({ _id: id })));
    const plain = client.db(testDb().databaseName).collection(named.collectionName);
    // The bulk reaches the server and is applied; its reply never comes (the call's deadline passes).
    const collection = delayedCollection(plain, { reply: (method) => (method === 'bulkWrite' ? new Promise(() => undefined) : undefined) });
    const lock = writeLock({ collection, locktimeout: 3_000 });
    const other = writeLock({ collection: named, locktimeout: 3_000 });
    let from = 0;
    const outcomes = await holdAll(
      lock,
      20,
      5_000,
      async () => {
        from = sent.length;
        await sleep(2_500);
        for (let id = 0; id < 20; id++) expect((await rejectionOf(other.acquire({ _id: id }, {}))).subtype, `document ${id} held twice`).to.equal('LockAlreadyTaken');
      },
      { timeout: 1_000 },
    );
    for (const held of outcomes as Held[]) expect(held.signal.aborted, `lock ${held.id} lost: ${String(held.signal.reason)}`).to.equal(false);
    const bulks = sent.slice(from).filter((event) => event.commandName === 'update' && (event.command.updates as unknown[]).length > 1);
    expect(bulks.length, 'bulks sent').to.be.above(0);
    // Only a lock due alone goes singly: the locks of a bulk whose reply was lost are not extended again.
    const inBulks = new Set(bulks.flatMap(writtenIds));
    const singles = sent.slice(from).filter((event) => event.commandName === 'findAndModify' && writtenIds(event).some((id) => inBulks.has(id)));
    expect(singles.length, 'locks of a lost bulk extended singly').to.be.below(inBulks.size);
  });

  it('a bulk held back past the leases lands after another client acquired: it extends nothing of the new holder and revives nothing', async () => {
    const named = await freshCollection(Array.from({ length: 10 }, (_, id) => ({ _id: id })));
    const held = gate();
    let bulks = 0;
    // Every extension is held back (a lock due alone goes singly): the leases end, then they land.
    const collection = delayedCollection(named, {
      request: (method, _n, args) => (method === 'bulkWrite' ? (bulks++, held.promise) : isExtension(method, args) ? held.promise : undefined),
    });
    const lock = writeLock({ collection, locktimeout: 1_000 });
    const other = writeLock({ collection: named, locktimeout: 60_000 });
    const holds: Array<{ id: number; start: number; end: number }> = [];
    const bodies = Array.from({ length: 10 }, (_, id) =>
      lock
        .using({ _id: id }, {}, async (_handle, signal) => {
          const start = Date.now();
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          holds.push({ id, start, end: Date.now() });
        })
        .then(undefined, (error: Error) => error),
    );
    expect(await until(() => holds.length === 10, 10_000), 'every body told its lease ended').to.equal(true);
    expect(bulks, 'bulks held back').to.be.above(0);
    const newHolders = await Promise.all(Array.from({ length: 10 }, (_, id) => other.acquire({ _id: id }, { wait: 5_000 }).then((handle) => ({ id, handle, at: Date.now() }))));
    const before = await named.find().sort({ _id: 1 }).toArray();
    held.open();
    await Promise.all(bodies);
    const after = await named.find().sort({ _id: 1 }).toArray();
    expect(after, 'the late extensions changed nothing').to.deep.equal(before);
    for (const { id, handle, at } of newHolders) {
      const entries = after[id]!.lock.tags.write as Array<{ id: string }>;
      expect(entries.map((entry) => entry.id), `document ${id}: the new holder's entry alone`).to.deep.equal([handle.id]);
      expect(after[id]!.lock.fence, `document ${id}: its fence`).to.equal(handle.fence);
      const hold = holds.find((one) => one.id === id)!;
      expect(hold.end, `document ${id}: no two holders at once`).to.be.at.most(at);
    }
  });
});
