import type { Collection, Document } from 'mongodb';
import type { CommandPriority } from '../common/options';
import { ClassCaps } from './attempt-throttle';
import { DeadlineExceededError, deadlines, failInSlices, UnsentCommandError, type Watched } from './deadlines';
import { RankedQueue, type Queued } from './ranked-queue';

/** A slot handed to the first command sent synchronously inside {@link CommandGate.admitted}; `expired`: none came in time. */
interface Baton {
  readonly startedAt: number;
  readonly expired: boolean;
  readonly priority: CommandPriority;
}

/** The driver's `maxPoolSize` when the client's options do not say (its documented default). */
const DRIVER_POOL_DEFAULT = 100;
/** The cap with `maxPoolSize: 0` (no limit in the driver): what its default pool gets. */
const UNLIMITED_POOL_CAP = capFor(DRIVER_POOL_DEFAULT);

/**
 * The most lock commands a client with `maxPoolSize` connections sends at once:
 * `max(1, min(maxPoolSize - 4, floor(maxPoolSize * 3 / 4)))` (75 of the default 100; 6 of 10; 1
 * below 6). The rest of the pool stays free for what does not queue here: each open change feed
 * holds a connection for its `getMore` (lib/waiting/change-feed.ts, one per namespace and field),
 * and the application's own commands share the client. A quarter, and at least 4, leaves a stream's
 * `getMore` a connection even when every lock command slot is taken, so that the wake-ups it carries
 * are not queued behind the attempts they would spare. With `maxPoolSize: 0` (no limit in the
 * driver) the cap is the default pool's, 75: more at once only lengthens the server's own queue.
 */
export function capFor(maxPoolSize: number): number {
  if (maxPoolSize === 0) return UNLIMITED_POOL_CAP;
  return Math.max(1, Math.min(maxPoolSize - 4, Math.floor((maxPoolSize * 3) / 4)));
}

/**
 * Caps a client's lock commands in flight ({@link capFor}): past the cap, a command waits here, not
 * in the driver's connection pool, so that what depends on when it is sent is decided when it
 * leaves: its time stamp ({@link admitted}) and its `sentAt`. Releases (commits among them) leave
 * first, then extensions, then cleanups (a few at a time: {@link ClassCaps}), then
 * acquisition attempts and reads, first come first served within a
 * class. Time queued counts within the call's `timeout`: a command whose deadline passes here is
 * never sent, and fails with an {@link UnsentCommandError}. A slot is freed when the command's
 * caller is answered (the reply, or its client-side deadline). Below the cap a command costs a
 * counter; only a queued one is watched for its deadline (on the one shared timer).
 *
 * While the client's lease keepers are behind, attempts and reads are held back ({@link ClassCaps}).
 */
export class CommandGate {
  #inFlight = 0;
  readonly #queue = new RankedQueue();
  #baton: Baton | undefined;
  /** Slots freed and not yet passed on, while {@link free} passes one on. */
  #frees = 0;
  #freeing = false;
  readonly #caps = new ClassCaps(() => this.#fill());

  constructor(readonly cap: number) {}

  /** Lock commands in flight now (sent, or admitted and about to be). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Lock commands waiting for a slot now. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** The client's lease keepers are behind: attempts and reads are held back for `forMs` ({@link AttemptThrottle.keepersBehind}). */
  keepersBehind(forMs: number): void {
    this.#caps.attempts.keepersBehind(forMs);
  }

  /**
   * Sends `operation` once a slot is free (at once below the cap), within `timeout` ms counted from
   * now; rejects with an {@link UnsentCommandError} when that passes first without sending it.
   * `operation` is given what is left of `timeout` (ms) as it leaves: its limit on the server
   * (`maxTimeMS`, `wtimeoutMS`), so that the server gives up when its caller does.
   */
  send<T>(name: string, timeout: number, given: CommandPriority | undefined, operation: (leftMs: number) => Promise<T>): Promise<T> {
    const baton = this.#baton;
    if (baton) {
      this.#baton = undefined;
      return baton.expired ? Promise.reject(new UnsentCommandError(name, timeout)) : this.#run(name, timeout, baton.startedAt, baton.priority, operation);
    }
    const startedAt = performance.now();
    const kind = given ?? 'attempt';
    if (this.#take(kind)) return this.#run(name, timeout, startedAt, kind, operation);
    return new Promise<T>((resolve, reject) => {
      this.#enqueue(kind, startedAt + timeout, () => void this.#run(name, timeout, startedAt, kind, operation).then(resolve, reject), () => reject(new UnsentCommandError(name, timeout)));
    });
  }

  /**
   * Waits for a slot (within `timeout` ms from now), then runs `then` in it: the first command
   * `then` sends synchronously (before its first `await`) takes the slot, so that what `then`
   * computes first (a time stamp) is computed when the command leaves the queue. A slot `then`
   * leaves unused is freed when it returns. When the deadline passes in the queue, `then` still
   * runs, and its first command fails at once with an {@link UnsentCommandError}, never sent.
   */
  admitted<T>(timeout: number, given: CommandPriority | undefined, then: () => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    const kind = given ?? 'attempt';
    if (this.#take(kind)) return this.#handOver({ startedAt, expired: false, priority: kind }, then);
    return new Promise<T>((resolve, reject) => {
      const admit = (expired: boolean) => () => void this.#handOver({ startedAt, expired, priority: kind }, then).then(resolve, reject);
      this.#enqueue(kind, startedAt + timeout, admit(false), admit(true));
    });
  }

  /** Runs `then` with `baton` for its first command; frees a live slot it did not use. */
  #handOver<T>(baton: Baton, then: () => Promise<T>): Promise<T> {
    this.#baton = baton;
    try {
      return then();
    } catch (error) {
      return Promise.reject(error);
    } finally {
      if (this.#baton === baton) {
        this.#baton = undefined;
        if (!baton.expired) this.#free(baton.priority);
      }
    }
  }

  /**
   * Sends `operation` in a slot it holds, within what is left of `timeout` since `startedAt` (never
   * once that passed); frees the slot when its caller is answered: by the reply, or by the
   * client-side deadline (the driver's late outcome is then observed and dropped).
   */
  #run<T>(name: string, timeout: number, startedAt: number, priority: CommandPriority, operation: (leftMs: number) => Promise<T>): Promise<T> {
    const endsAt = startedAt + timeout;
    if (performance.now() >= endsAt) {
      this.#free(priority);
      return Promise.reject(new UnsentCommandError(name, timeout));
    }
    let pending: Promise<T>;
    try {
      pending = operation(Math.max(1, Math.ceil(endsAt - performance.now())));
    } catch (error) {
      this.#free(priority);
      return Promise.reject(error);
    }
    return new Promise<T>((resolve, reject) => {
      let answered = false;
      const answer = (): boolean => {
        if (answered) return false;
        answered = true;
        this.#free(priority);
        return true;
      };
      const entry: Watched = { endsAt, expire: () => answer() && reject(new DeadlineExceededError(name, timeout)) };
      deadlines.add(entry);
      pending.then(
        (value) => {
          deadlines.delete(entry);
          if (answer()) resolve(value);
        },
        (error: unknown) => {
          deadlines.delete(entry);
          if (answer()) reject(error);
        },
      );
    });
  }

  #enqueue(priority: CommandPriority, endsAt: number, start: () => void, fail: () => void): void {
    const entry: Queued = {
      endsAt,
      start,
      fail,
      gone: false,
      priority,
      expire: () => {
        if (entry.gone) return;
        this.#queue.left(entry);
        fail();
      },
    };
    this.#queue.push(entry);
    deadlines.add(entry);
  }

  /**
   * A slot was freed: passed on ({@link passOn}). A slot freed while one is being passed on (an
   * admitted `then` that sent nothing, a write that failed before sending) is passed on by the same
   * loop, never by a nested call: a queue of thousands such would otherwise overflow the stack.
   */
  #free(priority: CommandPriority): void {
    this.#caps.ended(priority);
    this.#passOnSlots(1);
  }

  /** More attempts may be in flight: slots left free while they were held back are passed on, as far as the throttle allows. */
  #fill(): void {
    const room = this.cap - this.#inFlight;
    if (room <= 0 || this.#queue.size === 0) return;
    this.#inFlight += room;
    this.#passOnSlots(room);
    if (this.#inFlight < this.cap && this.#queue.size > 0) this.#caps.attempts.rampOn();
  }

  /** Passes on `count` slots, each as {@link passOn} does, in one loop (see {@link free}). */
  #passOnSlots(count: number): void {
    this.#frees += count;
    if (this.#freeing) return;
    this.#freeing = true;
    try {
      for (; this.#frees > 0; this.#frees--) this.#passOn();
    } finally {
      this.#freeing = false;
    }
  }

  /** The first queued command of the best class takes a freed slot (one whose deadline passed fails instead, unsent), or it is returned. */
  #passOn(): void {
    const allows = (priority: CommandPriority): boolean => this.#caps.allows(priority);
    for (let next = this.#queue.take(allows); next; next = this.#queue.take(allows)) {
      deadlines.delete(next);
      if (performance.now() >= next.endsAt) {
        // Thousands can expire together: they fail in slices, not in this loop (see failInSlices).
        failInSlices(next.fail);
        continue;
      }
      this.#caps.started(next.priority);
      return next.start();
    }
    this.#inFlight--;
  }

  /** Takes a slot for a command sent at once, unless the cap (or its class's: the throttle of attempts, the cap of cleanups) says it waits. */
  #take(priority: CommandPriority): boolean {
    if (this.#inFlight >= this.cap || !this.#caps.allows(priority)) return false;
    this.#inFlight++;
    this.#caps.started(priority);
    return true;
  }
}

const gates = new WeakMap<object, CommandGate>();

/** The gate of `collection`'s driver client (one per client, as the change feeds are), its cap from the client's `maxPoolSize`. */
export function commandGateOf(collection: Collection<Document>): CommandGate {
  const client: object = (collection as unknown as { db?: { client?: object } }).db?.client ?? collection;
  let gate = gates.get(client);
  if (!gate) {
    const maxPoolSize = (client as { options?: { maxPoolSize?: unknown } }).options?.maxPoolSize;
    gates.set(client, (gate = new CommandGate(capFor(typeof maxPoolSize === 'number' ? maxPoolSize : DRIVER_POOL_DEFAULT))));
  }
  return gate;
}
