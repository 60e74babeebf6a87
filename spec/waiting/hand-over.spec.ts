/**
 * Hand-over in one write (lib/locks/hand-over.ts): a release in this process gives the lock to the
 * next waiter it blocks in the same update that removes the holder's entry; the waiter learns it
 * holds the lock without an attempt of its own.
 */
import * as diagnostics from 'node:diagnostics_channel';
import { expect } from 'chai';
import { Binary, ObjectId, type Collection, type Document } from 'mongodb';
import { multiLock, writeLock } from '../../lib';
import { describeLock } from '../../lib/locks/lock-kind';
import { delayedCollection, isHandOverCall, type DelayPlan } from '../../stress/delayed-collection';
import { commandsSentBy, freshCollection, sleep } from '../support/fixture';
import { gate, isHandOver, outcomeOf } from '../support/lock-commands';

describe('hand-over in one write', () => {
  // Fair: each waiter takes its ticket (one command), then the release before it hands it the lock
  // (one): it does not look at the queue first (a look while a hand-over is on its way is wasted).
  for (const { fair, bound } of [
    { fair: false, bound: 1.5 },
    { fair: true, bound: 2.5 },
  ])
  it(`8 waiters in one process${fair ? ', fair' : ''}: one holder at a time, fences increase, under ${bound} commands per critical section`, async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const lock = writeLock({ collection, locktimeout: 10_000, fair });
    const sections = 200;
    let done = 0;
    let inside = 0;
    let overlaps = 0;
    const fences: number[] = [];
    const { commands, error } = await commandsSentBy(() =>
      Promise.all(
        Array.from({ length: 8 }, async () => {
          while (done < sections) {
            const held = await lock.acquire({ _id: 'hot' }, { wait: 20_000 });
            if (++inside > 1) overlaps++;
            fences.push(held.fence);
            done++;
            await new Promise((resolve) => setImmediate(resolve));
            inside--;
            await held.release();
          }
        }),
      ),
    );
    expect(error).to.equal(undefined);
    expect(overlaps).to.equal(0);
    expect(fences).to.deep.equal([...fences].sort((a, b) => a - b));
    expect(new Set(fences).size).to.equal(fences.length);
    const lockCommands = commands.filter((name) => name === 'findAndModify' || name === 'update').length;
    console.log(`      ${fences.length} sections, ${lockCommands} lock commands (${(lockCommands / fences.length).toFixed(2)} per section): ${JSON.stringify(tally(commands))}`);
    expect(lockCommands / fences.length).to.be.below(bound);
    const doc = await collection.findOne({ _id: 'hot' as never });
    expect(doc?.lock?.tags?.write ?? []).to.deep.equal([]);
  });
});

function tally(names: string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const name of names) counts[name] = (counts[name] ?? 0) + 1;
  return counts;
}

describe('hand-over: a process yields a hot document to others (cohorting)', () => {
  it('a waiter of another process gets the document while 4 workers here keep handing it to each other', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const here = writeLock({ collection, locktimeout: 10_000 });
    const elsewhere = writeLock({ collection, locktimeout: 10_000 }); // its own waiters: another process, as far as hand-overs go
    let running = true;
    let sections = 0;
    const workers = Array.from({ length: 4 }, async () => {
      while (running) {
        const held = await here.acquire({ _id: 'hot' }, { wait: 20_000 });
        sections++;
        await held.release();
      }
    });
    while (sections < 10) await sleep(5); // the hand-overs are going on
    const { result: outsider, commands } = await commandsSentBy(() => elsewhere.acquire({ _id: 'hot' }, { wait: 15_000 }));
    const during = sections;
    await outsider!.release();
    running = false;
    await Promise.all(workers);
    console.log(`      the other process's waiter got the document after ${during} sections here; ${commands.filter((name) => name === 'update').length} plain releases meanwhile`);
    expect(outsider?.fence).to.be.a('number');
  });

  it('in one process, at most 32 hand-overs in a row: then a plain release', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'hot' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    let done = 0;
    const { commands } = await commandsSentBy(() =>
      Promise.all(
        Array.from({ length: 4 }, async () => {
          while (done < 200) {
            const held = await lock.acquire({ _id: 'hot' }, { wait: 20_000 });
            done++;
            await held.release();
          }
        }),
      ),
    );
    const plainReleases = commands.filter((name) => name === 'update').length;
    // 200 sections with 4 workers waiting: a yield after every 32 hand-overs (more plain releases when a waiter was mid-attempt).
    expect(plainReleases).to.be.at.least(Math.floor(done / 33));
  });
});

describe('hand-over under faults', () => {
  /** Resolves once `hot` holds no live write entry (fails after `ms`). */
  async function untilFree(collection: Collection<Document>, ms = 5_000): Promise<void> {
    const until = Date.now() + ms;
    for (;;) {
      const doc = await collection.findOne({ _id: 'hot' as never });
      const live = ((doc?.lock?.tags?.write ?? []) as Array<{ exp: Date }>).filter((entry) => entry.exp.getTime() > Date.now());
      if (live.length === 0) return;
      if (Date.now() > until) throw new Error(`still held ${ms} ms later: ${JSON.stringify(live)}`);
      await sleep(20);
    }
  }

  for (const side of ['request', 'reply'] as const) {
    it(`a waiter aborted while the hand-over's ${side} is held back rejects at once; the lock it was handed is then released`, async () => {
      const collection = await freshCollection([{ _id: 'hot' }]);
      const held = gate();
      const plan: DelayPlan = (method, _n, args) => (isHandOver(method, args) ? held.promise : undefined);
      const lock = writeLock({ collection: delayedCollection(collection, { [side]: plan }), locktimeout: 10_000 });
      const holder = await lock.acquire({ _id: 'hot' });
      const controller = new AbortController();
      const waiting = untilWaiting();
      const waiter = outcomeOf(lock.acquire({ _id: 'hot' }, { wait: 10_000, signal: controller.signal }));
      await waiting;
      const released = outcomeOf(holder.release());
      await sleep(50); // the hand-over is on its way, held back (if it were not, the abort below comes after the waiter won, and the test fails)
      controller.abort(new Error('caller gave up'));
      const outcome = await waiter;
      expect(outcome === 'resolved' ? outcome : outcome.message).to.equal('caller gave up');
      held.open();
      expect(await released).to.equal('resolved');
      await untilFree(collection);
      const doc = await collection.findOne({ _id: 'hot' as never });
      expect(doc?.lock?.fence, 'the hand-over landed (then was released)').to.equal(2);
    });

    it(`a hand-over whose ${side} is lost (past the deadline) is settled: the holder's release resolves, the waiter gets the lock, nothing is left held`, async () => {
      const collection = await freshCollection([{ _id: 'hot' }]);
      let handOvers = 0;
      const plan: DelayPlan = (method, _n, args) => (isHandOver(method, args) && ++handOvers === 1 ? 700 : undefined);
      const lock = writeLock({ collection: delayedCollection(collection, { [side]: plan }), locktimeout: 10_000, timeout: 300 });
      const holder = await lock.acquire({ _id: 'hot' });
      const waiting = untilWaiting();
      const waiter = lock.acquire({ _id: 'hot' }, { wait: 10_000 });
      await waiting;
      const started = Date.now();
      // The request side: the hand-over had not landed, the plain release that follows matches (and a late hand-over then can
      // no longer land). The reply side: it had landed, the release finds the holder's entry gone, a read finds the waiter's.
      await holder.release();
      const next = await waiter;
      expect(Date.now() - started, 'the waiter did not wait for a lease to end').to.be.below(5_000);
      expect(handOvers).to.equal(1);
      // Request side: the hand-over never landed, the waiter acquired by itself (2). Reply side: it landed (2), was withdrawn, the waiter acquired (3).
      expect(next.fence).to.equal(side === 'request' ? 2 : 3);
      await sleep(800); // a late request has arrived by now
      const doc = await collection.findOne({ _id: 'hot' as never });
      expect((doc?.lock?.tags?.write as Array<{ id: string }>).map((entry) => entry.id), 'the waiter is the only holder').to.deep.equal([next.id]);
      expect(doc?.lock?.fence, side === 'request' ? 'the late hand-over matched nothing' : 'the hand-over landed, then the waiter acquired').to.equal(side === 'request' ? 2 : 3);
      await next.release();
      await untilFree(collection);
    });
  }
});

/**
 * Resolves once an acquisition of this process started waiting (`monglock:wait`, published before
 * it goes to sleep) and its sleep began (the rest of that turn's microtasks ran): a release now
 * hands it the lock.
 */
async function untilWaiting(): Promise<void> {
  await new Promise<void>((resolve) => {
    const listener = (): void => {
      diagnostics.unsubscribe('monglock:wait', listener);
      resolve();
    };
    diagnostics.subscribe('monglock:wait', listener);
  });
  await new Promise((resolve) => setImmediate(resolve));
}

describe('hand-over: the document and the token it hands over', () => {
  const collidingIds: Array<[string, unknown, unknown]> = [
    ['a legacy UUID (Binary subtype 3) and a UUID (subtype 4) of the same bytes', new Binary(Buffer.from('00112233445566778899aabbccddeeff', 'hex'), 3), new Binary(Buffer.from('00112233445566778899aabbccddeeff', 'hex'), 4)],
    ['an ObjectId and a Binary whose base64 is its hex', new ObjectId('0123456789abcdef01234567'), new Binary(Buffer.from('0123456789abcdef01234567', 'base64'), 0)],
  ];
  for (const [what, x, y] of collidingIds) {
    it(`a release of document X never gives a waiter for another document Y a lock (${what}: _ids whose JSON is the same)`, async () => {
      expect(JSON.stringify(y)).to.equal(JSON.stringify(x));
      const collection = await freshCollection([{ _id: x }, { _id: y }] as never);
      expect(await collection.countDocuments(), 'two documents').to.equal(2);
      const lock = writeLock({ collection, locktimeout: 10_000 });
      const other = writeLock({ collection, locktimeout: 10_000 }); // another instance (another process, say)
      const holderOfY = await other.acquire({ _id: y });
      const holderOfX = await lock.acquire({ _id: x });
      const waiting = untilWaiting();
      const waiterForY = outcomeOf(lock.acquire({ _id: y }, { wait: 1_500 }));
      await waiting;
      await holderOfX.release();
      const outcome = await waiterForY;
      const docX = await collection.findOne({ _id: x } as never);
      const docY = await collection.findOne({ _id: y } as never);
      const ids = (doc: unknown): string[] => ((doc as { lock?: { tags?: { write?: Array<{ id: string }> } } })?.lock?.tags?.write ?? []).map((entry) => entry.id);
      // Y is held by `other` all along: the waiter for Y must not be told it holds a lock.
      const told = outcome === 'resolved' ? `resolved while Y is held by [${ids(docY)}] (other: ${holderOfY.id}) and X by [${ids(docX)}]` : outcome.message;
      expect(told).to.match(/still held|already/i);
      await holderOfY.release();
    });
  }

  it('a hand-over whose reply was lost never reports a token another acquisition got (one of a concurrent tag counted since)', async () => {
    const collection = await freshCollection([{ _id: 'hot' }]);
    let handOvers = 0;
    const plan: DelayPlan = (method, _n, args) => (isHandOver(method, args) && ++handOvers === 1 ? 700 : undefined);
    const lock = multiLock({
      collection: delayedCollection(collection, { reply: plan }),
      locktimeouts: { write: 10_000, note: 10_000 },
      lockRelationships: { write: { cooperative: ['write'] } }, // `note` is concurrent with `write`
      timeout: 300,
    });
    const holder = await lock.acquire({ _id: 'hot' }, { tag: 'write' });
    const waiting = untilWaiting();
    const waiter = lock.acquire({ _id: 'hot' }, { tag: 'write', wait: 10_000 });
    await waiting;
    const released = holder.release();
    await sleep(100); // the hand-over has landed (fence 2); its reply is held back past the timeout
    const note = await lock.acquire({ _id: 'hot' }, { tag: 'note' }); // fence 3
    await released;
    const next = await waiter;
    // The hand-over (token 2) landed, its reply was lost: withdrawn, and the waiter acquired by itself after the note (3).
    expect([holder.fence, next.fence, note.fence], 'fences of the holder, the waiter, the note: each its own').to.deep.equal([1, 4, 3]);
    const doc = await collection.findOne({ _id: 'hot' as never });
    expect((doc?.lock?.tags?.write as Array<{ id: string }>).map((entry) => entry.id), 'the waiter holds write').to.deep.equal([next.id]);
    await next.release();
    await note.release();
  });
});

/** The private maps of a lock object's LocalWaiters. */
function localState(lock: object): { byDocument: Map<string, unknown>; handedInRow: Map<string, number>; held: Map<string, unknown> } {
  return describeLock(lock)!.core.waiters as unknown as { byDocument: Map<string, unknown>; handedInRow: Map<string, number>; held: Map<string, unknown> };
}

describe('hand-over: waiters of other documents and abandoned grantees', () => {
  it('LocalWaiters keeps no per-document state after grantees were abandoned while their hand-overs were on their way (10 documents)', async function () {
    this.timeout(30_000);
    const ids = Array.from({ length: 10 }, (_, i) => `doc-${i}`);
    const collection = await freshCollection(ids.map((_id) => ({ _id })));
    let held = gate();
    const plan: DelayPlan = (method, _n, args) => (isHandOverCall(method, args) ? held.promise : undefined);
    // No change stream: on mongo-java-server a release of another document nudges every waiter, which then may not be asleep when its holder releases (no hand-over).
    const lock = writeLock({ collection: delayedCollection(collection, { reply: plan }), locktimeout: 10_000, changeStreams: false });
    for (const id of ids) {
      held = gate();
      const holder = await lock.acquire({ _id: id });
      const controller = new AbortController();
      const waiting = untilWaiting();
      const waiter = outcomeOf(lock.acquire({ _id: id }, { wait: 10_000, signal: controller.signal }));
      await waiting;
      const released = outcomeOf(holder.release());
      await sleep(50); // the hand-over has landed; its reply is held back
      controller.abort(new Error('caller gave up'));
      const outcome = await waiter;
      expect(outcome === 'resolved' ? outcome : outcome.message).to.equal('caller gave up');
      held.open();
      expect(await released).to.equal('resolved');
    }
    await sleep(200); // the locks handed to the abandoned waiters are released by now
    const docs = await collection.find().toArray();
    expect(docs.flatMap((doc) => (doc.lock?.tags?.write ?? []) as unknown[]), 'nothing left held').to.deep.equal([]);
    const state = localState(lock);
    expect(state.byDocument.size, 'no waiter is left').to.equal(0);
    // Nobody waits anywhere: a count of hand-overs in a row kept for a document is memory that grows with every document.
    expect([...state.handedInRow.keys()], 'handedInRow after every wait ended').to.deep.equal([]);
  });

  it('a release of document X never hands a waiter for document Y a lock (_ids of a class that serializes itself with toBSON)', async () => {
    /** An application's key type: private fields, serialized by the driver through `toBSON()` (js-bson's hook). */
    class OrderKey {
      readonly #tenant: string;
      readonly #order: number;
      constructor(tenant: string, order: number) {
        this.#tenant = tenant;
        this.#order = order;
      }
      toBSON(): Document {
        return { tenant: this.#tenant, order: this.#order };
      }
    }
    const x = (): OrderKey => new OrderKey('a', 1);
    const y = (): OrderKey => new OrderKey('b', 2);
    const collection = await freshCollection([{ _id: { tenant: 'a', order: 1 } }, { _id: { tenant: 'b', order: 2 } }] as never);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const other = writeLock({ collection, locktimeout: 10_000 }); // another process, say
    const holderOfY = await other.acquire({ _id: y() });
    const holderOfX = await lock.acquire({ _id: x() });
    const waiting = untilWaiting();
    const handles: Array<{ id: string; fence: number }> = [];
    const waiterForY = outcomeOf(lock.acquire({ _id: y() }, { wait: 1_500 }).then((handle) => handles.push(handle)));
    await waiting;
    await lock.release({ _id: x() }, { lock: holderOfX }); // as writeLock's documentation shows it
    const outcome = await waiterForY;
    const docY = await collection.findOne({ _id: { tenant: 'b', order: 2 } } as never);
    const docX = await collection.findOne({ _id: { tenant: 'a', order: 1 } } as never);
    const told = outcome === 'resolved' ? `resolved with lock ${handles[0]?.id} (fence ${handles[0]?.fence}); X holds [${(docX?.lock?.tags?.write as Array<{ id: string }>).map((e) => e.id)}] (fence ${docX?.lock?.fence}), Y is held by [${(docY?.lock?.tags?.write as Array<{ id: string }>).map((e) => e.id)}] (other: ${holderOfY.id})` : outcome.message;
    if (outcome === 'resolved') expect.fail(`the waiter for Y was ${told}`);
    expect(told, 'the waiter for Y').to.match(/still held|already/i);
    await holderOfY.release();
  });
});
