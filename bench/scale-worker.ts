/**
 * A worker process of `bench:scale` (started by bench/scale-children.ts): one MongoClient with
 * command monitoring, one writeLock on the run's collection, and the steps the parent asks for one
 * at a time: hold documents and release them all at once, wait on documents, hold `using()`
 * bodies, work documents in an acquire/release loop, and report its counters ({@link CommandProbe}).
 */
import { MongoClient, type Collection, type Document } from 'mongodb';
import { writeLock, type LockHandle, type WriteLock } from '../lib';
import { CommandProbe, now } from './scale-probe';

/** Up to `limit` kinds of error message (messages alike but for their numbers are one kind), each with the first seen and how often. */
class ErrorTally {
  private readonly seen = new Map<string, { message: string; count: number }>();
  constructor(private readonly limit = 3) {}
  add(error: unknown): void {
    const message = (error instanceof Error ? error.message : String(error)).replace(/\s+/g, ' ').slice(0, 300);
    const kind = message.replace(/\d+/g, '#');
    const known = this.seen.get(kind);
    if (known) known.count++;
    else if (this.seen.size < this.limit) this.seen.set(kind, { message, count: 1 });
  }
  list(): string[] {
    return [...this.seen.values()].map(({ message, count }) => `${count} × ${message}`);
  }
}

interface Connect {
  readonly uri: string;
  readonly db: string;
  readonly collection: string;
  readonly changeStreams: boolean;
  readonly locktimeout: number;
}

let client: MongoClient | undefined;
let probe: CommandProbe | undefined;
let lock: WriteLock<Document> | undefined;
let held: LockHandle[] = [];

/** The waiters started by `wait`. */
let waiters: { startedAt: number; settled: Promise<unknown>; acquired: LockHandle[]; at: number[]; errors: ErrorTally; failed: number } | undefined;
/** The `using()` bodies started by `using`. */
let bodies: { end: () => void; runs: Array<Promise<unknown>>; lost: number; lostReasons: ErrorTally; failed: number; errors: ErrorTally; releaseErrors: ErrorTally; releaseFailed: number } | undefined;
/** The acquire/release loops started by `work`. */
let work: { stop: boolean; sections: number; failed: number; errors: ErrorTally; loops: Array<Promise<void>> } | undefined;

const byId = (id: string): Document => ({ _id: id });

const steps: Record<string, (args: Record<string, unknown>) => Promise<unknown>> = {
  async connect(args) {
    const task = args as unknown as Connect;
    client = await MongoClient.connect(task.uri, { monitorCommands: true });
    probe = new CommandProbe(client);
    const collection: Collection<Document> = client.db(task.db).collection(task.collection);
    lock = writeLock({ collection, locktimeout: task.locktimeout, changeStreams: task.changeStreams });
    return { pid: process.pid };
  },

  async snapshot() {
    return { ...probe!.snapshot(), sections: work?.sections ?? 0 };
  },

  /** The longest pause between two `getMore`s of the stream from `from` to `to` (absolute ms; null without a stream). */
  async longestGap(args) {
    return probe!.longestGetMoreGap(args.from as number, args.to as number);
  },

  /** Acquires every id (100 at a time) and keeps the handles. */
  async hold(args) {
    const ids = args.ids as string[];
    for (let at = 0; at < ids.length; at += 100) held.push(...(await Promise.all(ids.slice(at, at + 100).map((id) => lock!.acquire(byId(id), { wait: 30_000 })))));
    return { held: held.length };
  },

  /** Releases every held handle at once: when the releases were sent and when the last resolved. */
  async release() {
    const startedAt = now();
    const outcomes = await Promise.allSettled(held.map((handle) => handle.release()));
    held = [];
    const errors = new ErrorTally();
    for (const outcome of outcomes) if (outcome.status === 'rejected') errors.add(outcome.reason);
    return { startedAt, endedAt: now(), failed: outcomes.filter((outcome) => outcome.status === 'rejected').length, errors: errors.list() };
  },

  /** Starts one waiter per id (`acquire` with `wait`); answers at once. */
  async wait(args) {
    const ids = args.ids as string[];
    const state = { startedAt: now(), acquired: [] as LockHandle[], at: [] as number[], errors: new ErrorTally(), failed: 0, settled: Promise.resolve() as Promise<unknown> };
    const all = ids.map((id) =>
      lock!.acquire(byId(id), { wait: args.waitMs as number }).then(
        (handle) => {
          state.at.push(now());
          state.acquired.push(handle);
        },
        (error: unknown) => {
          state.failed++;
          state.errors.add(error);
        },
      ),
    );
    waiters = state;
    state.settled = Promise.all(all);
    return { startedAt: state.startedAt };
  },

  /** Once every waiter has acquired or failed: their outcomes; then releases what they hold. */
  async settled() {
    const state = waiters!;
    await state.settled;
    const result = { acquired: state.acquired.length, failed: state.failed, errors: state.errors.list(), firstAt: Math.min(...state.at), lastAt: Math.max(...state.at) };
    await Promise.allSettled(state.acquired.map((handle) => handle.release()));
    waiters = undefined;
    return result;
  },

  /** Starts one `using()` body per id, each holding until `end`; answers once every acquisition succeeded or failed. */
  async using(args) {
    const ids = args.ids as string[];
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    const state = { end, runs: [] as Array<Promise<unknown>>, lost: 0, lostReasons: new ErrorTally(), failed: 0, errors: new ErrorTally(), releaseErrors: new ErrorTally(), releaseFailed: 0 };
    bodies = state;
    const startedAt = now();
    let decided = 0;
    let lastAcquiredAt = startedAt;
    let allDecided!: () => void;
    const acquisitions = new Promise<void>((resolve) => (allDecided = resolve));
    const decide = (): void => void (++decided === ids.length && allDecided());
    state.runs = ids.map((id) => {
      let entered = false;
      return lock!
        .using(byId(id), {}, async (_handle, signal) => {
          entered = true;
          lastAcquiredAt = now();
          decide();
          signal.addEventListener('abort', () => {
            state.lost++;
            state.lostReasons.add(signal.reason);
          });
          await Promise.race([ended, new Promise((resolve) => signal.addEventListener('abort', resolve))]);
        })
        .catch((error: unknown) => {
          if (!entered) {
            state.failed++;
            state.errors.add(error);
            decide();
          } else {
            state.releaseFailed++;
            state.releaseErrors.add(error);
          }
        });
    });
    if (ids.length === 0) allDecided();
    await acquisitions;
    return { startedAt, lastAcquiredAt, acquired: ids.length - state.failed, failed: state.failed, errors: state.errors.list(), lostSoFar: state.lost };
  },

  /** Ends every `using()` body and waits for their releases. */
  async end() {
    const state = bodies!;
    state.end();
    const startedAt = now();
    await Promise.all(state.runs);
    bodies = undefined;
    return { lost: state.lost, lostReasons: state.lostReasons.list(), releaseFailed: state.releaseFailed, releaseErrors: state.releaseErrors.list(), releaseMs: now() - startedAt };
  },

  /** Starts `loops` acquire/release loops over `ids` (each takes the next id in turn); answers at once. */
  async work(args) {
    const ids = args.ids as string[];
    const state = { stop: false, sections: 0, failed: 0, errors: new ErrorTally(), loops: [] as Array<Promise<void>> };
    let next = 0;
    const loop = async (): Promise<void> => {
      while (!state.stop) {
        const id = ids[next++ % ids.length]!;
        try {
          const handle = await lock!.acquire(byId(id), { wait: 5_000 });
          await handle.release();
          state.sections++;
        } catch (error) {
          state.failed++;
          state.errors.add(error);
        }
      }
    };
    state.loops = Array.from({ length: args.loops as number }, loop);
    work = state;
    return {};
  },

  async stopWork() {
    const state = work!;
    state.stop = true;
    await Promise.all(state.loops);
    return { sections: state.sections, failed: state.failed, errors: state.errors.list() };
  },

  async close() {
    await client?.close();
    client = undefined;
    return {};
  },
};

process.on('message', (message: { id: number; op: string } & Record<string, unknown>) => {
  const step = steps[message.op];
  const run = step ? step(message) : Promise.reject(new Error(`unknown step ${message.op}`));
  run.then(
    (result) => process.send?.({ id: message.id, result }),
    (error: unknown) => process.send?.({ id: message.id, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
  );
});
process.on('disconnect', () => process.exit(0));
