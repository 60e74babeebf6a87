/**
 * The demo's worker processes (demo/worker.ts, run by `node --import tsx`). Each is the leader of
 * a process group of its own, so that stopping a worker stops everything it started too, and
 * each watches its IPC channel, so that it stops by itself if the demo dies without stopping it.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { WorkerMessage, WorkerReply, WorkerReport } from './protocol';

const ROOT = join(__dirname, '..');
// A group of its own per worker (kill(-pid) reaches its children); Windows has no process groups.
const GROUPS = process.platform !== 'win32';

/** A started worker: its hapi server listens on `port`. */
export interface Worker {
  readonly index: number;
  readonly pid: number;
  readonly port: number;
  /** What it observed (asked over the IPC channel). */
  report(): Promise<WorkerReport>;
}

/** The workers of one run: forked by {@link start}, all stopped by {@link stop}, also those that failed to start. */
export class Workers {
  private readonly children: ChildProcess[] = [];
  private stopping: Promise<number> | undefined;

  /** Forks `count` workers with `env` and resolves once every one listens (rejects if one exits first, or after `timeoutMs`). */
  start(count: number, env: NodeJS.ProcessEnv, timeoutMs = 60_000): Promise<Worker[]> {
    return Promise.all(Array.from({ length: count }, (_, index) => this.startOne(index, env, timeoutMs)));
  }

  private startOne(index: number, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Worker> {
    // cwd is the repository, so that tsx applies its tsconfig.json: `monglock` resolves to lib/.
    const child = fork(join(__dirname, 'worker.ts'), [], {
      cwd: ROOT,
      env,
      execArgv: ['--import', 'tsx'],
      detached: GROUPS,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.children.push(child);
    return new Promise((resolve, reject) => {
      const settle = (): void => {
        clearTimeout(timer);
        child.off('message', onMessage).off('exit', onExit).off('error', reject);
      };
      const timer = setTimeout(() => {
        settle();
        reject(new Error(`worker ${index} (pid ${child.pid}) did not listen within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      const onMessage = (message: WorkerReply): void => {
        if (message.type !== 'ready') return;
        settle();
        resolve({ index, pid: child.pid!, port: message.port, report: () => reportOf(child) });
      };
      const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
        settle();
        reject(new Error(`worker ${index} (pid ${child.pid}) exited before it listened (${signal ?? `exit code ${code}`})`));
      };
      child.on('message', onMessage).once('exit', onExit).once('error', reject);
    });
  }

  /**
   * Stops every worker and everything it started: SIGTERM to its process group (it closes its
   * server and its MongoDB client), SIGKILL to what is left of the group after 5 s. Resolves how
   * many process groups still had a process then (0 unless something escaped its group).
   */
  stop(): Promise<number> {
    this.stopping ??= Promise.all(this.children.map(stopTree)).then((gone) => gone.filter((ok) => !ok).length);
    return this.stopping;
  }
}

function reportOf(child: ChildProcess): Promise<WorkerReport> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: WorkerReply): void => {
      if (message.type !== 'report') return;
      child.off('message', onMessage).off('exit', onExit);
      resolve(message.report);
    };
    const onExit = (): void => reject(new Error(`worker pid ${child.pid} exited before it reported`));
    child.on('message', onMessage).once('exit', onExit);
    if (!child.send('report' satisfies WorkerMessage)) onExit();
  });
}

/** Stops a worker's process tree; resolves true once no process of its group is left. */
async function stopTree(child: ChildProcess): Promise<boolean> {
  const pid = child.pid;
  if (pid === undefined) return true; // never started
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : once(child, 'exit').then(() => undefined);
  signal(child, 'SIGTERM');
  const timedOut = await Promise.race([exited.then(() => false), sleep(5_000).then(() => true)]);
  if (timedOut) signal(child, 'SIGKILL');
  await exited;
  // The worker is gone; its own children (tsx's esbuild service) leave when their pipes close.
  if (await groupEmpty(pid, 1_000)) return true;
  signal(child, 'SIGKILL');
  return groupEmpty(pid, 1_000);
}

function signal(child: ChildProcess, name: NodeJS.Signals): void {
  try {
    if (GROUPS) process.kill(-child.pid!, name);
    else child.kill(name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

/** True once no process is left in process group `pid` (polled for up to `ms`). */
async function groupEmpty(pid: number, ms: number): Promise<boolean> {
  if (!GROUPS) return true;
  for (const until = Date.now() + ms; ; await sleep(20)) {
    try {
      process.kill(-pid, 0);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ESRCH') return true;
    }
    if (Date.now() >= until) return false;
  }
}
