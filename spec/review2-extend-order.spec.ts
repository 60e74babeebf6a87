/**
 * Review 2 of ceca4ec: the lease keeper of using() replans from the handle's expiry, which every
 * extension's reply overwrites (LockHandle.updateExpiry): the last reply to arrive wins. Two
 * extensions in flight at once (the keeper's, and the body's own `handle.extend()`, the case the
 * fix addressed) can be applied by the server in one order and answered in the other: the
 * server keeps the expiry of the one applied last, the handle the expiry of the one answered
 * last. When the body's shorter extension is applied last but answered first, the handle (and
 * the keeper) believe in the keeper's longer lease; another client takes the lock when the
 * shorter one ends, while the body's signal is still un-aborted.
 */
import { expect } from 'chai';
import { writeLock } from '../lib';
import { delayedCollection } from '../stress/delayed-collection';
import { freshCollection, sleep } from './support/fixture';

const realNow = (): number => performance.timeOrigin + performance.now();

describe('review 2: two extensions in flight whose replies arrive in the other order: the handle follows the server', () => {
  it('using({ locktimeout: 4000 }) of a lock whose default lease is 1000 ms; the body extends while the keeper\'s extension reply is slow', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    // findOneAndUpdate #1 acquires, #2 is the keeper's extension (at about 2 s): its reply comes
    // back 400 ms late (the server applied it at once). #3 is the body's extension.
    const slow = delayedCollection(collection, { reply: (method, n) => (method === 'findOneAndUpdate' && n === 2 ? 400 : 0) });
    const jobs = writeLock({ collection: slow, locktimeout: 1_000 });
    const other = writeLock({ collection, locktimeout: 1_000 });
    let abortedAt = 0;
    let serverExpiry = 0;
    let handleExpiry = 0;
    const start = realNow();
    const holding = jobs.using({ _id: 1 }, { locktimeout: 4_000 }, async (handle, signal) => {
      signal.addEventListener('abort', () => (abortedAt = realNow()), { once: true });
      await sleep(2_150);
      await handle.extend(); // "a fresh lease before the next step" (the tag's lease: 1000 ms)
      await sleep(500); // the keeper's late reply has arrived meanwhile
      handleExpiry = handle.expiresAt;
      const doc = await collection.findOne({ _id: 1 as never });
      serverExpiry = (doc?.lock?.tags?.write?.[0]?.exp as Date | undefined)?.getTime() ?? 0;
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve(), { once: true });
        setTimeout(resolve, 4_000);
      });
    });
    let settledAt = 0;
    void holding.finally(() => (settledAt = realNow())).catch(() => undefined);
    await sleep(50);
    const next = await other.acquire({ _id: 1 }, { wait: 8_000 });
    const acquiredAt = realNow();
    await holding.catch(() => undefined);
    await next.release().catch(() => undefined);
    expect(handleExpiry, 'the handle never believes in a later expiry than the server keeps').to.be.at.most(serverExpiry);
    // Either the keeper kept the lock until using() released it, or the signal aborted first.
    if (abortedAt === 0) return void expect(settledAt, 'using() released before the other client acquired').to.be.at.most(acquiredAt);
    expect(
      abortedAt,
      `handle.expiresAt ${handleExpiry}, the server's ${serverExpiry} (${handleExpiry - serverExpiry} ms apart); ` +
        `another client acquired at +${Math.round(acquiredAt - start)} ms, the body's signal aborted at +${Math.round(abortedAt - start)} ms`,
    ).to.be.below(acquiredAt);
  });
});
