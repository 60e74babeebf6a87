import { getEventListeners } from 'node:events';
import { expect } from 'chai';
import { election, withOwner, type Term } from '../../lib';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';

describe('election: a campaign whose document is deleted, owner contexts, racing proclaims, observations that end, the Promise option and shared signals', () => {
  it('a campaign waiting while the election\'s document is deleted creates it again and leads, with a greater token', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const lease = 800;
    const elections = election({ collection, lease });
    const first = await elections.campaign({ _id: 'x' }, { value: 'a' });
    const other = election({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), lease });
    const waiting = other.campaign({ _id: 'x' }, { value: 'b' });
    await sleep(200);
    await collection.deleteOne({ _id: 'x' as never });
    const aborted = await Promise.race([new Promise((resolve) => first.signal.addEventListener('abort', () => resolve(true))), sleep(3 * lease).then(() => false)]);
    expect(aborted, 'the first term ends with its document').to.equal(true);
    const second = await waiting;
    expect(second.fence).to.be.above(first.fence);
    expect((await elections.leader({ _id: 'x' }))?.value).to.equal('b');
    await first.resign();
    await second.resign();
  });

  it('within one withOwner context a second campaign of the same election waits (no re-entry)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 2_000 });
    await withOwner('request-1', async () => {
      const first = await elections.campaign({ _id: 'x' }, { value: 1 });
      let second: Term | undefined;
      const pending = elections.campaign({ _id: 'x' }, { value: 2 }).then((t) => (second = t));
      await sleep(300);
      expect(second, 'no re-entry').to.equal(undefined);
      await first.resign();
      await pending;
      expect(second!.fence).to.be.above(first.fence);
      expect((await elections.leader({ _id: 'x' }))?.value).to.equal(2);
      await second!.resign();
    });
  });

  it('proclaims racing the renewals of a short lease: the value is the last proclaimed, the term lives on', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 600 });
    const term = await elections.campaign({ _id: 'x' }, { value: 0 });
    for (let value = 1; value <= 40; value++) {
      if (term.signal.aborted) expect.fail(`aborted before proclaim ${value}: ${String(term.signal.reason)}`);
      await term.proclaim(value);
      if (value % 4 === 0) await sleep(20);
    }
    await sleep(300);
    expect(term.signal.aborted, String(term.signal.reason)).to.equal(false);
    expect((await elections.leader({ _id: 'x' }))?.value).to.equal(40);
    await term.resign();
  });

  it('observe on an already aborted signal yields nothing and leaves no timer', async function () {
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000 });
    const controller = new AbortController();
    controller.abort();
    const timersBefore = process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const seen: unknown[] = [];
    for await (const state of elections.observe({ _id: 'x' }, { signal: controller.signal })) seen.push(state);
    expect(seen).to.deep.equal([]);
    await sleep(500); // the change feed's own short-lived timer, seen gone by then
    expect(process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length).to.be.at.most(timersBefore);
  });

  it('observe whose read fails (its client closed) ends with a rejection', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const client = await newClient();
    const elections = election({ collection: client.db(collection.dbName).collection(collection.collectionName), lease: 1_000 });
    const seen: unknown[] = [];
    const observed = (async () => {
      for await (const state of elections.observe({ _id: 'x' })) seen.push(state);
    })();
    await sleep(200);
    await client.close(true);
    const error = await Promise.race([rejectionOf(observed), sleep(8_000).then(() => undefined)]);
    expect(error, 'the loop ends with the read\'s error').to.not.equal(undefined);
    expect(seen[0]).to.equal(undefined);
  });

  it('the Promise option: campaign, resign, proclaim and leader return its promises', async function () {
    class MyPromise<T> extends Promise<T> {}
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000, Promise: MyPromise as never });
    const campaigning = elections.campaign({ _id: 'x' });
    expect(campaigning).to.be.instanceOf(MyPromise);
    const term = await campaigning;
    expect(term.proclaim(1)).to.be.instanceOf(MyPromise);
    expect(elections.leader({ _id: 'x' })).to.be.instanceOf(MyPromise);
    const resigning = term.resign();
    expect(resigning).to.be.instanceOf(MyPromise);
    await resigning;
  });
  it('a long-lived signal shared by many campaigns and observations keeps no listener once they settle', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000 });
    const shutdown = new AbortController();
    for (let i = 0; i < 10; i++) {
      const term = await elections.campaign({ _id: 'x' }, { value: i, signal: shutdown.signal });
      const rival = await rejectionOf(elections.campaign({ _id: 'x' }, { wait: 50, signal: shutdown.signal }));
      expect(rival.subtype).to.equal('LockAlreadyTaken');
      for await (const state of elections.observe({ _id: 'x' }, { signal: shutdown.signal })) if (state) break;
      await term.resign();
    }
    expect(getEventListeners(shutdown.signal, 'abort')).to.have.length(0);
  });
});
