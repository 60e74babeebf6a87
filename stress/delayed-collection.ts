import type { Collection, Document } from 'mongodb';

/** A driver call a delay can apply to. */
export type DelayedMethod = 'findOneAndUpdate' | 'updateOne' | 'updateMany' | 'deleteMany' | 'bulkWrite' | 'aggregate';

/**
 * ms to hold a call back (or a promise to wait for; undefined: not at all), by method, by the
 * call's number (1-based, per method) and by its arguments (filter, update, options).
 */
export type DelayPlan = (method: DelayedMethod, call: number, args: readonly unknown[]) => number | Promise<unknown> | undefined;

/** When to hold calls back: before the request is sent, and before the reply is handed over. */
export interface Delays {
  readonly request?: DelayPlan;
  readonly reply?: DelayPlan;
}

/** True for a hand-over: an acquisition (`findOneAndUpdate`, +1 on the fence) that requires the holder's entry (`{ id }`) to be there. */
export function isHandOverCall(method: string, args: readonly unknown[]): boolean {
  if (method !== 'findOneAndUpdate' || (args[1] as Document | undefined)?.$inc?.['lock.fence'] !== 1) return false;
  const conditions = ((args[0] as Document | undefined)?.$and ?? []) as Document[];
  return conditions.some((condition) => typeof condition['lock.tags.write']?.$elemMatch?.id === 'string');
}

const METHODS: ReadonlySet<string> = new Set(['findOneAndUpdate', 'updateOne', 'updateMany', 'deleteMany', 'bulkWrite']);

/**
 * The same collection (same client, same server), with requests and/or replies of its lock
 * calls held back as `delays` says: a delay before the request is a slow network on the way
 * there (the server executes later), a delay before the reply a slow way back (the server has
 * executed). Test infrastructure: everything else passes through untouched.
 */
export function delayedCollection(collection: Collection<Document>, delays: Delays): Collection<Document> {
  const counts = new Map<string, number>();
  const hold = async (plan: DelayPlan | undefined, method: DelayedMethod, n: number, args: readonly unknown[]): Promise<void> => {
    const ms = plan?.(method, n, args) ?? 0;
    if (typeof ms !== 'number') await ms;
    else if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
  };
  const next = (method: string): number => {
    const n = (counts.get(method) ?? 0) + 1;
    counts.set(method, n);
    return n;
  };
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = String(property);
      if (method === 'aggregate') {
        return (...args: unknown[]) => {
          const n = next(method);
          const cursor = (value as (...a: unknown[]) => { toArray(): Promise<Document[]> }).apply(target, args);
          return {
            toArray: async () => {
              await hold(delays.request, 'aggregate', n, args);
              const docs = await cursor.toArray();
              await hold(delays.reply, 'aggregate', n, args);
              return docs;
            },
          };
        };
      }
      if (!METHODS.has(method)) return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const n = next(method);
        await hold(delays.request, method as DelayedMethod, n, args);
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        await hold(delays.reply, method as DelayedMethod, n, args);
        return result;
      };
    },
  });
}
