/**
 * Faults a real deployment introduces on the way to or inside the server, simulated at the place
 * where they arise (test infrastructure):
 *
 * - **A retry that fails after the first attempt landed.** The driver retries a retryable write
 *   whose reply was lost and reports the retry's error; the first attempt may have been applied.
 *   {@link failingAfterLanding} forwards the write, then throws the server error a retry could
 *   have met (462 IngressRequestRateLimitExceeded, 13 Unauthorized, …).
 * - **A command that lands late.** A command's `$$NOW` is fixed when it starts; one blocked on the
 *   server (behind a transaction, a prepare conflict, a full ticket queue) lands up to its
 *   `maxTimeMS` later, while its caller may already have been told of a failure (its connection
 *   dropped). {@link landingLate} answers the caller with that failure at once and applies the
 *   command later with `$$NOW` fixed at the time it was sent.
 */
import { MongoNetworkError, type Collection, type Document, type MongoServerError } from 'mongodb';
import { withNowFixed } from './simulated-cluster';

/** Which calls a fault applies to: by method, arguments and the call's number (1-based, per method). */
export type FaultMatch = (method: string, args: readonly unknown[], n: number) => boolean;

const WRITES = new Set(['findOneAndUpdate', 'updateOne', 'updateMany', 'deleteOne', 'deleteMany']);

/** The serverNow of this machine, which is also the test server's clock. */
const serverNow = (): number => performance.timeOrigin + performance.now();

/** `collection`, with the writes `match` names applied and then failed with `error()` (a retry's answer, or a reply the driver could not decode). */
export function failingAfterLanding(collection: Collection<Document>, match: FaultMatch, error: () => MongoServerError | Error): Collection<Document> {
  return wrapWrites(collection, async (method, args, n, send) => {
    const result = await send(args);
    if (match(method, args, n)) throw error();
    return result;
  });
}

/** A command applied late, and when it was. */
export interface LateLanding {
  readonly method: string;
  readonly args: readonly unknown[];
  /** When it was applied (this machine's clock), once it was. */
  appliedAt?: number;
  /** What the server answered it (undefined until then). */
  result?: unknown;
}

/**
 * `collection`, with the writes `match` names failed at once with a network error, and applied
 * `delayMs` later with every `$$NOW` fixed at the time they were sent; `landed` lists them.
 */
export function landingLate(collection: Collection<Document>, match: FaultMatch, delayMs: number, landed: LateLanding[] = []): Collection<Document> {
  return wrapWrites(collection, (method, args, n, send) => {
    if (!match(method, args, n)) return send(args);
    const fixed = args.map((arg) => withNowFixed(arg, new Date(serverNow())));
    const landing: LateLanding = { method, args };
    landed.push(landing);
    setTimeout(() => {
      send(fixed).then(
        (result) => Object.assign(landing, { appliedAt: serverNow(), result }),
        (error: unknown) => Object.assign(landing, { appliedAt: serverNow(), result: error }),
      );
    }, delayMs);
    return Promise.reject(new MongoNetworkError('connection reset while the command was blocked on the server (simulated)'));
  });
}

/** Sends a write's arguments (as given, or changed) to the collection. */
export type Send = (args: readonly unknown[]) => Promise<unknown>;

/** A proxy of `collection` whose writes (updates and deletes) go through `write` (numbered per method); everything else passes. */
export function wrapWrites(collection: Collection<Document>, write: (method: string, args: readonly unknown[], n: number, send: Send) => Promise<unknown>): Collection<Document> {
  const counts = new Map<string, number>();
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (!WRITES.has(method)) return (value as (...a: unknown[]) => unknown).bind(target);
      return (...args: unknown[]) => {
        const n = (counts.get(method) ?? 0) + 1;
        counts.set(method, n);
        return write(method, args, n, (sent) => (value as (...a: unknown[]) => Promise<unknown>).apply(target, [...sent]));
      };
    },
  });
}
