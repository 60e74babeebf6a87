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
  /** An acquisition attempt or a read (held back while the client's lease keepers are behind). */
  readonly attempt: boolean;
}

/** Queue index of each priority: releases first, then extensions, then attempts and reads. */
const RANK: Readonly<Record<CommandPriority, number>> = { release: 0, extend: 1, attempt: 2 };

/** True for the class of acquisition attempts and reads (a command given no priority is one). */
export function isAttempt(priority: CommandPriority | undefined): boolean {
  return RANK[priority ?? 'attempt'] === RANK.attempt;
}

/**
 * The commands waiting for a client's slots: one first-come, first-served queue per priority, the
 * best class first. An entry that left while queued (its deadline passed) is skipped when reached;
 * the consumed head of a long queue is cut off now and then, so a queue never grows with what left.
 */
export class RankedQueue {
  readonly #queues: Queued[][] = [[], [], []];
  readonly #heads = [0, 0, 0];
  #size = 0;

  /** Entries waiting now. */
  get size(): number {
    return this.#size;
  }

  push(priority: CommandPriority | undefined, entry: Queued): void {
    this.#queues[RANK[priority ?? 'attempt']]!.push(entry);
    this.#size++;
  }

  /** `entry` left while queued (it expired, marked `gone`): it is no longer counted. */
  left(entry: Queued): void {
    entry.gone = true;
    this.#size--;
  }

  /** Takes the first live entry of the best class (of attempts only when `attempts` allows them), or undefined. */
  take(attempts: () => boolean): Queued | undefined {
    if (this.#size === 0) return undefined;
    for (let rank = 0; rank < this.#queues.length; rank++) {
      if (rank === RANK.attempt && !attempts()) return undefined;
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
