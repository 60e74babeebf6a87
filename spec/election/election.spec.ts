import { expect } from 'chai';
import Bluebird from 'bluebird';
import { election, withOwner, type LeaderState, type Term } from '../../lib';
import { commandsSentBy, failureOf, freshCollection, newClient, rejectionOf, sleep, snapshotOf } from '../support/fixture';

describe('election', () => {
  it('campaign creates the missing document and leads; leader() reports the value and token; a second campaigner waits until the first resigns', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 2_000 });
    const first = await elections.campaign({ _id: 'billing' }, { value: { host: 'a' } });
    expect(await collection.countDocuments({ _id: 'billing' as never })).to.equal(1);
    expect(first.value).to.deep.equal({ host: 'a' });
    expect(first.signal.aborted).to.equal(false);
    const seen = await elections.leader({ _id: 'billing' });
    expect(seen).to.deep.include({ value: { host: 'a' }, fence: first.fence });
    expect(seen?.expiresAt).to.be.instanceOf(Date);

    const other = election({ collection: (await newClient()).db(collection.dbName).collection(collection.collectionName), lease: 2_000 });
    const waiting = other.campaign({ _id: 'billing' }, { value: 'b' });
    let second: Term | undefined;
    void waiting.then((term) => (second = term));
    await sleep(300);
    expect(second, 'nobody else leads while the first does').to.equal(undefined);
    await first.resign();
    expect(first.signal.aborted).to.equal(true);
    second = await waiting;
    expect(second.fence).to.be.above(first.fence);
    expect((await elections.leader({ _id: 'billing' }))?.value).to.equal('b');
    await second.resign();
    expect(await elections.leader({ _id: 'billing' })).to.equal(undefined);
  });

  it('keeps the lease past several lease lengths while the term lasts, and proclaim changes the value under the same token', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 1_000 });
    const term = await elections.campaign({ _id: 'x' });
    expect(term.value).to.equal(null);
    await sleep(2_500);
    expect(term.signal.aborted, 'renewed in the background').to.equal(false);
    expect(term.remaining()).to.be.above(0);
    await term.proclaim({ now: 'here' });
    expect(term.value).to.deep.equal({ now: 'here' });
    expect(await elections.leader({ _id: 'x' })).to.deep.include({ value: { now: 'here' }, fence: term.fence });
    expect(await collection.countDocuments({ _id: 'x' as never, ...term.guard() })).to.equal(1);
    await term.resign();
    expect((await rejectionOf(term.proclaim('late'))).subtype).to.equal('LockNotFound');
    expect(await collection.countDocuments({ _id: 'x' as never, ...term.guard() })).to.equal(0);
  });

  it('a forced release of the leader\'s lock aborts its term\'s signal', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 3_000 });
    const term = await elections.campaign({ _id: 'x' });
    await collection.updateOne({ _id: 'x' as never }, { $set: { 'lock.tags.leader': [] } });
    const aborted = await Promise.race([new Promise((resolve) => term.signal.addEventListener('abort', () => resolve(true))), sleep(4_000).then(() => false)]);
    expect(aborted).to.equal(true);
    await term.resign();
  });

  it('wait ends a campaign with LockAlreadyTaken, and its signal with its reason; neither ends a term already won', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 5_000 });
    const controller = new AbortController();
    const term = await elections.campaign({ _id: 'x' }, { signal: controller.signal });
    controller.abort(new Error('late'));
    await sleep(50);
    expect(term.signal.aborted, 'the campaign signal ends the wait only').to.equal(false);
    expect((await rejectionOf(elections.campaign({ _id: 'x' }, { wait: 200 }))).subtype).to.equal('LockAlreadyTaken');
    const stop = new AbortController();
    const pending = elections.campaign({ _id: 'x' });
    const stopped = elections.campaign({ _id: 'x' }, { signal: stop.signal });
    setTimeout(() => stop.abort(new Error('stop campaigning')), 100);
    expect((await rejectionOf(stopped)).message).to.equal('stop campaigning');
    await term.resign();
    const next = await pending;
    expect(next.fence).to.be.above(term.fence);
    await next.resign();
  });

  it('observe reports the current state, then each change of leader or value, and undefined once a lease runs out without a write', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 800 });
    const stop = new AbortController();
    const states: Array<LeaderState | undefined> = [];
    const observed = (async () => {
      for await (const state of elections.observe({ _id: 'x' }, { signal: stop.signal })) states.push(state);
    })();
    // Each step waits until the observer saw the one before (a loaded machine may read late: it then reports the latest state, not every step).
    const seen = async (count: number): Promise<void> => {
      for (let i = 0; i < 200 && states.length < count; i++) await sleep(50);
    };
    await seen(1);
    const term = await elections.campaign({ _id: 'x' }, { value: 1 });
    await seen(2);
    await term.proclaim(2);
    await seen(3);
    await term.resign();
    await seen(4);
    // A leader whose renewals cannot reach the server (its client closed): its lease ends without a write.
    const client = await newClient();
    const dying = election({ collection: client.db(collection.dbName).collection(collection.collectionName), lease: 1_500 });
    await dying.campaign({ _id: 'x' }, { value: 3 });
    await seen(5);
    await client.close(true);
    await seen(6);
    stop.abort();
    await observed;
    expect(states.map((s) => (s === undefined ? undefined : s.value))).to.deep.equal([undefined, 1, 2, undefined, 3, undefined]);
  });

  it('refuses bad input before anything is written', async () => {
    const collection = await freshCollection();
    const before = await snapshotOf(collection);
    expect((await failureOf(() => election({ collection, locktimeout: 100 } as never))).message).to.match(/lease/);
    expect((await failureOf(() => election({ collection, leese: 100 } as never))).message).to.match(/Unknown key `options.leese`/);
    const elections = election({ collection });
    expect((await rejectionOf(elections.campaign({ name: 'x' }))).message).to.match(/_id/);
    expect((await rejectionOf(elections.campaign({ _id: { $gt: 1 } }))).message).to.match(/named, not queried/);
    expect((await rejectionOf(elections.campaign({ _id: 1 }, { valeu: 1 } as never))).message).to.match(/Unknown key `params.valeu`/);
    expect((await rejectionOf(elections.campaign({ _id: 1 }, { value: () => 1 } as never))).message).to.match(/store/);
    expect(await snapshotOf(collection)).to.equal(before);
  });

  it('a campaign on a known document costs the creating upsert and one acquisition; leader() one read', async () => {
    const collection = await freshCollection([{ _id: 'x' }]);
    const elections = election({ collection, changeStreams: false });
    await (await elections.campaign({ _id: 'x' })).resign();
    const { commands, result } = await commandsSentBy(() => elections.campaign({ _id: 'x' }));
    expect(commands).to.deep.equal(['update', 'findAndModify']);
    expect((await commandsSentBy(() => elections.leader({ _id: 'x' }))).commands).to.deep.equal(['aggregate']);
    await result?.resign();
  });

  it('tokens keep growing when the election\'s document is deleted and created again by a campaign', async () => {
    const collection = await freshCollection();
    const elections = election({ collection });
    const first = await elections.campaign({ _id: 'x' });
    await first.resign();
    await collection.deleteOne({ _id: 'x' as never });
    await sleep(5);
    const second = await elections.campaign({ _id: 'x' });
    expect(second.fence).to.be.above(first.fence);
    await second.resign();
  });

  it('many clients campaigning in turn: one leader at a time, its guarded writes never interleave with another term\'s, tokens strictly grow', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'x', log: [] }]);
    const clients = await Promise.all(Array.from({ length: 5 }, () => newClient()));
    const rounds = 4;
    await Promise.all(
      clients.map(async (client, who) => {
        const elections = election({ collection: client.db(collection.dbName).collection(collection.collectionName), lease: 1_000 });
        for (let round = 0; round < rounds; round++) {
          const term = await elections.campaign({ _id: 'x' }, { value: who });
          for (let step = 0; step < 3; step++) {
            await collection.updateOne({ _id: 'x' as never, ...term.guard() }, { $push: { log: { who, fence: term.fence, step } } as never });
            await sleep(5);
          }
          await term.resign();
        }
      }),
    );
    const log = ((await collection.findOne({ _id: 'x' as never }))?.log ?? []) as Array<{ who: number; fence: number; step: number }>;
    expect(log).to.have.length(clients.length * rounds * 3, 'every guarded write of a live term landed');
    for (let i = 0; i < log.length; i += 3) {
      const term = log.slice(i, i + 3);
      expect(term.map((entry) => entry.step), 'a term\'s writes are contiguous').to.deep.equal([0, 1, 2]);
      expect(new Set(term.map((entry) => entry.fence)).size).to.equal(1);
      if (i > 0) expect(term[0]!.fence).to.be.above(log[i - 1]!.fence);
    }
  });

  it('observe gives a slow consumer the latest state, not every step, and leaves no listener or timer once the loop breaks', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 5_000 });
    const term = await elections.campaign({ _id: 'x' }, { value: 0 });
    const timersBefore = process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const seen: unknown[] = [];
    for await (const state of elections.observe({ _id: 'x' })) {
      seen.push(state?.value);
      if (seen.length === 1) for (let value = 1; value <= 5; value++) await term.proclaim(value);
      else if (state?.value === 5) break;
      await sleep(100);
    }
    expect(seen[0]).to.equal(0);
    expect(seen.at(-1)).to.equal(5);
    expect(seen.length, `not every step: ${JSON.stringify(seen)}`).to.be.below(6);
    expect(process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length).to.be.at.most(timersBefore);
    await term.resign();
  });

  it('a second campaign of the same process waits like any other, also within one withOwner context (no re-entry); with the Promise option, methods return its promises', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 3_000, Promise: Bluebird });
    const campaigning = withOwner('request-1', () => elections.campaign({ _id: 'x' }));
    expect(campaigning).to.be.instanceOf(Bluebird);
    const first = await campaigning;
    let second: Term<unknown, typeof Bluebird> | undefined;
    const waiting = withOwner('request-1', () => elections.campaign({ _id: 'x' }).then((term) => (second = term)));
    await sleep(300);
    expect(second, 'not a nested hold of the leader').to.equal(undefined);
    const resigned = first.resign();
    expect(resigned).to.be.instanceOf(Bluebird);
    await resigned;
    await waiting;
    expect(second?.fence).to.be.above(first.fence);
    await second?.resign();
  });
});
