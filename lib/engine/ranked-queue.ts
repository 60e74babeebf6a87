import type { CommandPriority } from '../common/options';
import type { Watched } from './deadlines';

/** A command waiting for a slot of its client's gate (lib/engine/command-gate.ts). */
export interface Queued extends Watched {
  /** Sends it, in the slot it was given. */
  readonly start: () => void;
  /** Fails it, unsent (its deadline passed). */
  readonly fail: () => void;
  /** Set once it left the queue (started or expired): the queue skips it. */
  gone: boolean;
  /** Its class (a command given none is an attempt): attempts and cleanups have caps of their own in flight. */
  readonly priority: CommandPriority;
}

/** Queue index of each priority: releases first, then extensions, then cleanups, then attempts and reads. */
const RANK: Readonly<Record<CommandPriority, number>> = { release: 0, extend: 1, cleanup: 2, attempt: 3 };
const BY_RANK: readonly CommandPriority[] = ['release', 'extend', 'cleanup', 'attempt'];

/**
 * The commands waiting for a client's slots: one first-come, first-served queue per priority, the
 * best class first. An entry that left while queued (its deadline passed) is skipped when reached;
 * the consumed head of a long queue is cut off now and then, so a queue never grows with what left.
 */
export class RankedQueue {
  readonly #queues: Queued[][] = [[], [], [], []];
  readonly #heads = [0, 0, 0, 0];
  #size = 0;

  /** Entries waiting now. */
  get size(): number {
    return this.#size;
  }

  push(entry: Queued): void {
    this.#queues[RANK[entry.priority]]!.push(entry);
    this.#size++;
  }

  /** `entry` left while queued (it expired, marked `gone`): it is no longer counted. */
  left(entry: Queued): void {
    entry.gone = true;
    this.#size--;
  }

  /** Takes the first live entry of the best class that `allows` one more in flight, or undefined. */
  take(allows: (priority: CommandPriority) => boolean): Queued | undefined {
    if (this.#size === 0) return undefined;
    for (let rank = 0; rank < this.#queues.length; rank++) {
      if (!allows(BY_RANK[rank]!)) continue;
      const queue = this.#queues[rank]!;
      let head = this.#heads[rank]!;
      while (head < queue.length && queue[head]!.gone) head++;
      if (head === queue.length) {
        queue.length = 0;
        this.#heads[rank] = 0;
        continue;
      }
      const entry = queue[head]!;
      this.#heads[rank] = head + 1;
      if (head + 1 > 1_024 && head * 2 > queue.length) {
        queue.splice(0, head + 1);
        this.#heads[rank] = 0;
      }
      this.left(entry);
      return entry;
    }
    return undefined;
  }
}
