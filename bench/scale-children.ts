/**
 * The worker processes of `bench:scale`: each a child (node with tsx) running bench/scale-worker.ts,
 * asked to do one step at a time over its IPC channel. Every child started is tracked, so that
 * {@link stopAllWorkers} (and the parent's exit, whatever its cause) ends them all.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

const WORKER_FILE = join(__dirname, 'scale-worker.ts');
const live = new Set<ChildProcess>();

// A child exits by itself once its channel closes; SIGKILL covers one stuck in a busy loop.
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** One worker process: `ask` sends a step and resolves its result. */
export class Worker {
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }>();
  private exited: Error | undefined;

  private constructor(
    readonly name: string,
    private readonly child: ChildProcess,
  ) {
    child.on('message', (message: { id: number; result?: unknown; error?: string }) => {
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      clearTimeout(waiting.timer);
      if (message.error !== undefined) waiting.reject(new Error(`worker ${name}: ${message.error}`));
      else waiting.resolve(message.result);
    });
    child.once('exit', (code, signal) => {
      live.delete(child);
      this.exited = new Error(`worker ${name} exited (${code ?? signal})`);
      for (const waiting of this.pending.values()) {
        clearTimeout(waiting.timer);
        waiting.reject(this.exited);
      }
      this.pending.clear();
    });
  }

  /** Starts a worker process (it connects when asked). */
  static start(name: string): Worker {
    const child = fork(WORKER_FILE, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    live.add(child);
    return new Worker(name, child);
  }

  /** The process id (its CPU and memory are the worker's own figures). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Sends step `op` with `args`; rejects with the worker's error, on its exit, or after `timeoutMs`. */
  ask<R>(op: string, args: object = {}, timeoutMs = 180_000): Promise<R> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`worker ${this.name}: ${op} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject, timer });
      this.child.send({ id, op, ...args });
    });
  }

  /** Asks the worker to close its client and exit; kills it if it has not exited within 10 s. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    await this.ask('close', {}, 10_000).catch(() => undefined);
    const killer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    if (this.child.connected) this.child.disconnect();
    await exited;
    clearTimeout(killer);
  }
}

/** Stops every worker still running (each asked to close, then killed). */
export async function stopAllWorkers(workers: readonly Worker[]): Promise<void> {
  await Promise.all(workers.map((worker) => worker.stop()));
}

/** Kills every worker process this process started and has not seen exit. */
export function killAllWorkers(): void {
  for (const child of live) child.kill('SIGKILL');
}
