import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { realNow } from '../support/clock';
import { isAcquisition, settleTime, whatAnAcquisitionGets } from '../support/lock-commands';
import { freshCollection, sleep } from '../support/fixture';

/*
 * An independent review's tests of 84581fe, which sent a waiting call's first attempt in the turn
 * of the call (so that callers that come together send in the order they came): an abort in that
 * turn then came too late to stop a lock being written. Every call now takes one turn before it
 * sends anything. The second test is of an older defect the review found: a fair call queued
 * behind one of its process counted `wait` again after its ticket was taken.
 */

/** `collection` with its lock writes recorded, and the replies of acquisitions held back `replyMs`. */
function recorded(collection: Collection<Document>, replyMs: number): { proxy: Collection<Document>; sent: string[] } {
  const sent: string[] = [];
  const proxy = delayedCollection(collection, {
    request: (method, _n, args) => {
      if (method === 'findOneAndUpdate' || method === 'updateOne') sent.push(isAcquisition(method, args) ? 'acquisition' : method);
      return undefined;
    },
    reply: (method, _n, args) => (isAcquisition(method, args) ? replyMs : undefined),
  });
  return { proxy, sent };
}

describe('a waiting call aborted in the turn it was made (review)', () => {
  for (const fair of [true, false]) {
    it(`${fair ? 'fair' : 'not fair'}: acquire(..., { wait, signal }) then signal.abort() in the same turn: it sends nothing, and the document stays free`, async function () {
      this.timeout(10_000);
      const collection = await freshCollection([{ _id: 1 }]);
      const { proxy, sent } = recorded(collection, 300);
      const lock = writeLock({ collection: proxy, locktimeout: 10_000, fair });
      await (await lock.acquire({ _id: 1 })).release(); // warm: the connection is open, the server's clock known
      sent.length = 0;
      const controller = new AbortController();
      const started = realNow();
      const pending = lock.acquire({ _id: 1 }, { wait: 5_000, signal: controller.signal });
      controller.abort(new Error('gave up'));
      expect(await settleTime(pending, started)).to.match(/^Error after \d ms$/);
      // Right after the call rejected: another caller (without waiting) should find the document free.
      const other = await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 });
      await sleep(400);
      expect({ sent, other }, 'writes sent by the aborted call; what another caller got right after it rejected').to.deep.equal({ sent: [], other: 'acquired' });
      expect(await whatAnAcquisitionGets(writeLock({ collection }), { _id: 1 }), 'later').to.equal('acquired');
    });
  }
});

describe('a fair waiter queued behind one of its process, whose ticket take is slow (review)', () => {
  it('gives up when its wait runs out, counted from the call (not again from when its ticket came back)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 1 });
    const delays = { takeReply: 0 };
    const isTake = (method: string, args: readonly unknown[]): boolean => method === 'findOneAndUpdate' && 'lock.queue' in (((args[1] as Document).$push ?? {}) as Document);
    const proxy = delayedCollection(collection, { reply: (method, _n, args) => (isTake(method, args) && delays.takeReply > 0 ? delays.takeReply : undefined) });
    const lock = writeLock({ collection: proxy, locktimeout: 10_000, fair: true });
    const stop = new AbortController();
    const first = lock.acquire({ _id: 1 }, { wait: 10_000, signal: stop.signal }).catch(() => undefined);
    for (let i = 0; i < 200 && (((await collection.findOne({ _id: 1 as never }))?.lock?.queue ?? []) as unknown[]).length < 1; i++) await sleep(10);
    delays.takeReply = 300; // the second caller's ticket comes back after 300 ms, within its 500 ms wait
    const started = realNow();
    const outcome = await settleTime(lock.acquire({ _id: 1 }, { wait: 500 }), started);
    stop.abort();
    await first;
    await holder.release();
    const ms = Number(/after (\d+) ms/.exec(outcome)?.[1]);
    expect(outcome).to.match(/^LockAlreadyTaken/);
    expect(ms, outcome).to.be.below(500 + 150);
  });
});
