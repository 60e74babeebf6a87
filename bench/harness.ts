/**
 * Helpers shared by the benchmarks: which monitored commands count, medians and ranges over
 * rounds, the load average, and a pool of long-lived child processes that start a task together.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import { isChangeStreamCommand } from '../support/command-kinds';

/** The driver's own commands (handshakes, heartbeats, session ends), never counted as a library's. */
const DRIVER_COMMANDS = new Set(['hello', 'isMaster', 'ismaster', 'endSessions', 'ping']);

/**
 * True for a command a lock call sent: not one of the driver's own, nor one of a change stream
 * (its `aggregate`, `getMore`, `killCursors`: a process's waiters' change feed, counted apart).
 */
export function countsAsCommand(event: { readonly commandName: string; readonly command?: { readonly pipeline?: unknown } }): boolean {
  return !DRIVER_COMMANDS.has(event.commandName) && !isChangeStreamCommand(event);
}


/** The median (the mean of the middle two for an even count; NaN for none). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : (sorted[Math.floor((sorted.length - 1) / 2)]! + sorted[Math.ceil((sorted.length - 1) / 2)]!) / 2;
}

/** `median (min–max)`, each with `digits` decimals. */
export function spread(values: readonly number[], digits = 0): string {
  return `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`;
}

/** The command-line value of `--name`, or `fallback`. */
export function argument(name: string, fallback: string): string {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 ? process.argv[at + 1]! : fallback;
}

/**
 * The flags of a benchmark, each `--name <n>` a whole number of at least 1, starting from
 * `defaults`; anything else is refused (exit 2), naming it, before anything starts.
 */
export function wholeNumberFlags<K extends string>(argv: readonly string[], defaults: Readonly<Record<K, number>>): Record<K, number> {
  const flags: Record<string, number> = { ...defaults };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i]!.replace(/^--/, '');
    const value = Number(argv[i + 1]);
    if (argv[i] === `--${name}` && name in flags && Number.isInteger(value) && value >= 1) flags[name] = value;
    else {
      const known = Object.keys(defaults).map((flag) => `--${flag} <n>`).join(', ');
      console.error(`unknown or invalid argument ${JSON.stringify(argv[i])} ${JSON.stringify(argv[i + 1] ?? '')}: flags are ${known} (whole numbers, at least 1)`);
      process.exit(2);
    }
  }
  return flags as Record<K, number>;
}

/** The 1, 5 and 15 minute load averages, as `uptime` prints them. */
export function loadAverage(): string {
  return loadavg()
    .map((load) => load.toFixed(2))
    .join(' ');
}

/** A task's outcome as a child reports it. */
type Reply<R> = { ready: true } | { result: R } | { error: string };

/**
 * Long-lived children of one benchmark file (forked once, so that no measurement pays for a
 * process's start-up): `run()` hands each its task, waits until every one has prepared, then
 * starts them all at once. The file serves tasks with {@link serveTasks} when its argv[2] is `--child`.
 */
export class ChildPool<T, R> {
  private constructor(private readonly children: readonly ChildProcess[]) {}

  static start<T, R>(file: string, count: number): ChildPool<T, R> {
    return new ChildPool<T, R>(Array.from({ length: count }, () => fork(file, ['--child'], { execArgv: ['--import', 'tsx'] })));
  }

  /** Runs `tasks[i]` on child i; `onReady` runs once all have prepared, just before they start. */
  async run(tasks: readonly T[], onReady: () => void = () => undefined): Promise<R[]> {
    if (tasks.length > this.children.length) throw new Error(`${tasks.length} tasks for ${this.children.length} children`);
    const children = this.children.slice(0, tasks.length);
    const replies = children.map((child) => new ReplyQueue<R>(child));
    try {
      children.forEach((child, i) => child.send({ task: tasks[i] }));
      await Promise.all(replies.map((queue) => queue.next()));
      onReady();
      for (const child of children) child.send({ go: true });
      return (await Promise.all(replies.map((queue) => queue.next()))).map((reply) => (reply as { result: R }).result);
    } finally {
      for (const queue of replies) queue.close();
    }
  }

  /** Runs `task` on child `index` alone. */
  async runOn(index: number, task: T): Promise<R> {
    const child = this.children[index];
    if (!child) throw new Error(`no child ${index} (of ${this.children.length})`);
    const replies = new ReplyQueue<R>(child);
    try {
      child.send({ task });
      await replies.next();
      child.send({ go: true });
      return ((await replies.next()) as { result: R }).result;
    } finally {
      replies.close();
    }
  }

  /** Lets every child exit (each exits once its channel closes). */
  stop(): void {
    for (const child of this.children) if (child.connected) child.disconnect();
  }
}

/** The replies of one child, one at a time; a child's error or exit rejects. */
class ReplyQueue<R> {
  private readonly waiting: Array<{ resolve: (reply: Reply<R>) => void; reject: (error: Error) => void }> = [];
  private readonly received: Array<Reply<R>> = [];
  private failure: Error | undefined;
  private readonly onMessage = (message: unknown): void => this.deliver(message as Reply<R>);
  private readonly onExit = (code: number | null): void => this.fail(new Error(`a benchmark child exited (${code})`));

  constructor(private readonly child: ChildProcess) {
    child.on('message', this.onMessage);
    child.on('exit', this.onExit);
  }

  next(): Promise<Reply<R>> {
    if (this.failure) return Promise.reject(this.failure);
    const reply = this.received.shift();
    if (reply) return Promise.resolve(reply);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  close(): void {
    this.child.off('message', this.onMessage);
    this.child.off('exit', this.onExit);
  }

  private deliver(reply: Reply<R>): void {
    if ('error' in reply) return this.fail(new Error(`in a benchmark child: ${reply.error}`));
    const waiter = this.waiting.shift();
    if (waiter) waiter.resolve(reply);
    else this.received.push(reply);
  }

  private fail(error: Error): void {
    this.failure ??= error;
    for (const waiter of this.waiting.splice(0)) waiter.reject(error);
  }
}

/**
 * The child's side of a {@link ChildPool}: for each task, `prepare` (untimed) resolves the
 * measurement, which starts when the parent says go. Any failure is sent to the parent.
 */
export function serveTasks<T, R>(prepare: (task: T) => Promise<() => Promise<R>>): void {
  let measure: Promise<() => Promise<R>> | undefined;
  const fail = (error: unknown): void => void process.send!({ error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  process.on('message', (message: { task?: T; go?: true }) => {
    if (message.task !== undefined) {
      measure = prepare(message.task);
      measure.then(() => process.send!({ ready: true }), fail);
    } else if (message.go && measure) {
      measure.then((run) => run()).then((result) => process.send!({ result }), fail);
    }
  });
  process.on('disconnect', () => process.exit(0));
}
