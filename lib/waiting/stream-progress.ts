import type { Collection, Document } from 'mongodb';

/**
 * The cluster time a change stream's resume token says the stream has read up to, as a 64-bit
 * number (seconds × 2^32 + increment), where the server gives one: mongod's tokens (4.0.7+) are a
 * KeyString whose first value is that Timestamp (`_data` is hex: `82`, then 8 bytes, big-endian).
 * Undefined for any other token (mongo-java-server's): a stream's progress is then known only by
 * its reads answering.
 */
export function tokenTime(token: unknown): bigint | undefined {
  const data = (token as { _data?: unknown } | null | undefined)?._data;
  if (typeof data !== 'string' || !/^82[0-9a-fA-F]{16}/.test(data)) return undefined;
  return BigInt(`0x${data.slice(2, 18)}`);
}

/**
 * The highest cluster time the client of `collection` has seen (each reply's `$clusterTime`), as
 * {@link tokenTime} counts it: taken when a refusal has arrived, it is at or after that refusal's
 * operation time. Undefined where the server sends none (a standalone, mongo-java-server).
 */
export function clientClusterTime(collection: Collection<Document>): bigint | undefined {
  const client = (collection as unknown as { db?: { client?: { topology?: { clusterTime?: { clusterTime?: unknown } } } } }).db?.client;
  const time = client?.topology?.clusterTime?.clusterTime as { t?: unknown; i?: unknown } | undefined;
  if (typeof time?.t !== 'number' || typeof time.i !== 'number') return undefined;
  return (BigInt(time.t) << 32n) | BigInt(time.i);
}

/** Who waits for a change stream to make progress, each told once (see {@link ProgressWaiters.add}). */
export class ProgressWaiters {
  private readonly waiting = new Set<{ readonly since: number; readonly clusterTime: bigint | undefined; readonly then: () => void }>();

  /**
   * Calls `then` once the stream has made progress past local time `since`: where the server gives
   * both times (mongod), a read answered whose token is at or past `clusterTime`; elsewhere, a read
   * answered at or after `since`. Returns the function that stops waiting.
   */
  add(since: number, clusterTime: bigint | undefined, then: () => void): () => void {
    const waiting = { since, clusterTime, then };
    this.waiting.add(waiting);
    return () => this.waiting.delete(waiting);
  }

  /**
   * A read answered at local time `answeredAt`, the stream's token at cluster time `read` (if known).
   * It may be a getMore that was already waiting when a waiter came (awaitData): a cursor that
   * answers goes on from where it stood, so the changes after that are still to come on it.
   */
  answered(answeredAt: number, read: bigint | undefined): void {
    for (const waiting of [...this.waiting]) {
      const known = read !== undefined && waiting.clusterTime !== undefined;
      if (known ? read < waiting.clusterTime! : answeredAt < waiting.since) continue;
      this.waiting.delete(waiting);
      waiting.then();
    }
  }
}
