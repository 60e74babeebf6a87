import Bluebird from 'bluebird';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { election } from '../../lib';
import '../../lib/bluebird';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, sleep } from '../support/fixture';

/**
 * A collection whose first acquisition reply (`findOneAndUpdate`: the server has executed it, the
 * lock is written) is held back until `open()`; `held` resolves once it is.
 */
function gatedCollection(collection: Collection<Document>, gatedMethod: 'findOneAndUpdate' | 'updateOne' = 'findOneAndUpdate'): { gated: Collection<Document>; held: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  let reached: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (reached = resolve));
  const gate = new Promise<void>((resolve) => (open = resolve));
  const gated = delayedCollection(collection, {
    reply: (method, n) => {
      if (method !== gatedMethod || n !== 1) return undefined;
      reached();
      return gate;
    },
  });
  return { gated, held, open };
}

/** Whoever leads `{ _id: 'x' }` by another client's reading, after `ms`. */
async function leaderAfter(collection: Collection<Document>, ms: number): Promise<unknown> {
  await sleep(ms);
  const client = await newClient();
  try {
    const other = election({ collection: client.db(collection.dbName).collection(collection.collectionName) });
    return await other.leader({ _id: 'x' });
  } finally {
    await client.close();
  }
}

describe('a campaign cancelled or aborted as its term is won', () => {
  it('bluebird: campaign(...).cancel() while the acquisition reply is on its way leaves nobody leading (no term nobody holds, renewed forever)', async function () {
    this.timeout(20_000);
    const Cancellable = Bluebird.getNewLibraryCopy();
    Cancellable.config({ cancellation: true });
    const collection = await freshCollection([{ _id: 'x' }]);
    const { gated, held, open } = gatedCollection(collection);
    const lease = 800;
    const elections = election({ collection: gated, lease, Promise: Cancellable });
    const pending = elections.campaign({ _id: 'x' }, { value: 'cancelled' });
    let term: unknown;
    void pending.then((t) => (term = t));
    await held;
    // The caller gives up; the reply (the lock is written) arrives in the same turn of the event loop.
    pending.cancel();
    open();
    // Several lease lengths later, a term that was never handed to anyone must not still be renewed.
    const leader = await leaderAfter(collection, 3 * lease);
    expect(term, 'the cancelled campaign resolves nothing').to.equal(undefined);
    expect(leader, 'the cancelled campaign leads nobody\'s term').to.equal(undefined);
  });

  it('the campaign\'s signal aborting in the turn its acquisition reply arrives: it rejects and holds nothing, or resolves a live term', async function () {
    this.timeout(60_000);
    const lease = 800;
    const wrong: string[] = [];
    for (let hops = 0; hops <= 30; hops += 2) {
      const collection = await freshCollection([{ _id: 'x' }]);
      const { gated, held, open } = gatedCollection(collection);
      const elections = election({ collection: gated, lease });
      const controller = new AbortController();
      const outcome = elections.campaign({ _id: 'x' }, { signal: controller.signal }).then(
        (term) => ({ term }),
        (error: unknown) => ({ error }),
      );
      await held;
      open();
      let chain = Promise.resolve();
      for (let i = 0; i < hops; i++) chain = chain.then(() => undefined);
      void chain.then(() => controller.abort(new Error('stop campaigning')));
      const settled = await outcome;
      if ('term' in settled) {
        // A term won is not ended by the campaign's signal (it ends the wait only).
        if (settled.term.signal.aborted) wrong.push(`${hops} hops: resolved a term whose signal had aborted (${String(settled.term.signal.reason)})`);
        await settled.term.resign();
      } else {
        if ((settled.error as Error).message !== 'stop campaigning') wrong.push(`${hops} hops: rejected with ${String(settled.error)}`);
        if ((await leaderAfter(collection, 300)) !== undefined) wrong.push(`${hops} hops: rejected, yet leads`);
      }
    }
    expect(wrong).to.deep.equal([]);
  });
  for (const [ends, how] of [
    ['wait', 'its `wait` runs out'],
    ['signal', 'its signal aborts'],
  ] as const) {
    for (const gatedMethod of ['findOneAndUpdate', 'updateOne'] as const) {
      it(`a campaign: ${how} while its ${gatedMethod === 'updateOne' ? 'creating upsert' : 'acquisition'} reply is on its way: it rejects and holds nothing, or resolves a live term`, async function () {
        this.timeout(20_000);
        const collection = await freshCollection(gatedMethod === 'updateOne' ? [] : [{ _id: 'x' }]);
        const { gated, held, open } = gatedCollection(collection, gatedMethod);
        const elections = election({ collection: gated, lease: 800 });
        const controller = new AbortController();
        const outcome = elections.campaign({ _id: 'x' }, ends === 'wait' ? { wait: 100 } : { signal: controller.signal }).then(
          (term) => ({ term }),
          (error: unknown) => ({ error }),
        );
        await held;
        await sleep(150);
        controller.abort(new Error('stop campaigning'));
        await sleep(300);
        open();
        const settled = await outcome;
        if ('term' in settled) {
          expect(settled.term.signal.aborted, String(settled.term.signal.reason)).to.equal(false);
          await settled.term.resign();
        } else {
          expect(await leaderAfter(collection, 300), 'a rejected campaign holds nothing').to.equal(undefined);
        }
      });
    }
  }
});
