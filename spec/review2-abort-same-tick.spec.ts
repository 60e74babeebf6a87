/**
 * Review 2: `abortable()` (waiting.ts) drops the late outcome of an attempt on the promise that
 * it already rejected, trusting that "the attempt cleans up after itself". The attempt's cleanup
 * (Acquisition.attempt) checks `abandoned` once, right after the write's reply; `abandon()` runs
 * only a few microtasks after the signal aborts. An abort that lands between that check and the
 * moment the attempt's value reaches abortable()'s `resolve` (a handful of microtasks, all in the
 * event-loop turn that processed the reply) makes acquire() reject with the abort's reason while
 * the won lock is neither handed to the caller nor released.
 *
 * Reaching that window needs the abort to be issued from the same turn that processed the reply
 * (here, a collection wrapper aborts a fixed number of microtasks after the reply; in an
 * application, code reacting to another promise settled in that turn).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../lib';
import { freshCollection, sleep } from './support/fixture';

/** `collection`, whose findOneAndUpdate calls `onReply` once `hops` microtasks after its reply. */
function abortingAfterReply(collection: Collection<Document>, hops: number, onReply: () => void): Collection<Document> {
  return new Proxy(collection, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property !== 'findOneAndUpdate') return (value as (...a: unknown[]) => unknown).bind(target);
      return async (...args: unknown[]) => {
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        let chain = Promise.resolve();
        for (let i = 0; i < hops; i++) chain = chain.then(() => undefined);
        void chain.then(onReply);
        return result;
      };
    },
  });
}

describe('review 2: a signal aborted in the event-loop turn that delivers the winning reply', () => {
  it('at every microtask offset, acquire rejects with the abort reason and releases the lock it won', async function () {
    this.timeout(30_000);
    const ids = Array.from({ length: 40 }, (_, i) => i);
    const collection = await freshCollection(ids.map((i) => ({ _id: i })));
    const leaked: number[] = [];
    const outcomes: string[] = [];
    for (const hops of ids) {
      const controller = new AbortController();
      const lock = writeLock({ collection: abortingAfterReply(collection, hops, () => controller.abort(new Error('gave up'))), locktimeout: 60_000 });
      const outcome = await lock.acquire({ _id: hops }, { wait: 1_000, signal: controller.signal }).then(
        async (handle) => {
          await handle.release();
          return 'won';
        },
        (error: Error) => error.message,
      );
      outcomes.push(`${hops}:${outcome}`);
      await sleep(50); // any release the library does has run
      if (outcome === 'gave up') {
        const doc = await collection.findOne({ _id: hops as never });
        const live = ((doc?.lock?.tags?.write ?? []) as Array<{ exp: Date }>).filter((e) => e.exp.getTime() > Date.now());
        if (live.length > 0) leaked.push(hops);
      }
    }
    expect(leaked, `microtask offsets after which the abort left a lock held nobody received (${outcomes.join(' ')})`).to.deep.equal([]);
  });
});
