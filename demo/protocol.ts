/** What demo/demo.ts and its worker processes (demo/worker.ts) say to each other. */

/** The database of the demo's accounts. */
export const DEMO_DB = 'monglock_demo';

/** The worker's routes, what each moves on the account it locks, and how often the clients call it. */
export const ROUTES = [
  { path: 'deposit', amount: +1, wait: 10_000, share: 0.6, label: 'deposit (waits up to 10 s)' },
  { path: 'deposit-now', amount: +1, wait: 0, share: 0.25, label: 'deposit-now (fails fast)' },
  { path: 'withdraw-now', amount: -3, wait: 0, share: 0.15, label: 'withdraw-now (fails fast)' },
] as const;
export type Route = (typeof ROUTES)[number];

/** Demo → worker, over the IPC channel. */
export type WorkerMessage = 'report';

/** Worker → demo, over the IPC channel. */
export type WorkerReply = { readonly type: 'ready'; readonly port: number } | { readonly type: 'report'; readonly report: WorkerReport };

/** What a worker observed, independently of the lock. */
export interface WorkerReport {
  readonly pid: number;
  /** Each handler's stay inside its critical section: account, entry and exit in µs of the machine's monotonic clock. */
  readonly sections: Array<[account: string, enteredUs: number, leftUs: number]>;
  /** Acquisitions that had to wait, by how they were to be woken: by a release in this worker (`local`), or, the holder elsewhere, by this worker's change stream (`stream`) or by polling. */
  readonly waits: { local: number; stream: number; polling: number };
  /** The first few errors its requests answered 500 with. */
  readonly errors: string[];
}

/** The 200 answer of a route that moved money. */
export interface MoveAnswer {
  /** The balance the commit wrote. */
  readonly balance: number;
  /** The lock's fencing token, pushed to the account's `fences` by the same commit. */
  readonly fence: number;
  /** ms from the request's arrival in the worker to its handler: acquiring the lock, waiting for it included. */
  readonly lockedMs: number;
}

/** An integer setting from the environment (DEMO_REQUESTS, …), checked before anything starts. */
export function envInteger(name: string, fallback: number, min: number): number {
  const given = process.env[name];
  if (given === undefined || given === '') return fallback;
  const value = Number(given);
  if (!Number.isInteger(value) || value < min) throw new RangeError(`Expected \`${name}\` to be an integer of at least ${min}, got \`${given}\``);
  return value;
}
