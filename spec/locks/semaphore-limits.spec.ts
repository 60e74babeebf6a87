/**
 * A semaphore's stored limit is every process's: a tag without a limit (shared or exclusive) is
 * refused while permits are held under one, a limited tag while a lock of it that is not a permit is
 * held, and a waiting caller refused for its limit is told so.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, semaphore } from '../../lib';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';
import { delayedCollection } from '../../stress/delayed-collection';

describe('semaphore limits: one number for every process sharing a document', () => {
  it('waiting: a limit mismatch that appears during a short wait is reported as what it is (LimitMismatch), not SemaphoreFull', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 1 }]);
    const old3 = semaphore({ collection, limit: 3, locktimeout: 60_000 });
    const new5 = semaphore({ collection, limit: 5, locktimeout: 60_000 });
    let go!: () => void;
    const gate = new Promise<void>((resolve) => (go = resolve));
    // The waiter's second attempt leaves once the limit-5 holder is in (a slow network, nothing else).
    let armed = false;
    const slow = delayedCollection(collection, {
      request: (method) => {
        if (method !== 'findOneAndUpdate' || !armed) return undefined;
        armed = false;
        return gate;
      },
    });
    const waiter3 = semaphore({ collection: slow, limit: 3, locktimeout: 60_000 });
    const full = [await old3.acquire({ _id: 1 }), await old3.acquire({ _id: 1 }), await old3.acquire({ _id: 1 })];
    const waiting = rejectionOf(waiter3.acquire({ _id: 1 }, { wait: 200 }));
    await sleep(30);
    armed = true; // its first attempt was refused and explained (SemaphoreFull: 3 of 3): it goes on waiting
    await Promise.all(full.map((h) => h.release()));
    const holder5 = await new5.acquire({ _id: 1 }); // 1 permit held, under the stored limit 5
    go();
    const error = await waiting;
    expect((await new5.inspect({ _id: 1 })).permits).to.deep.equal({ permit: { used: 1, limit: 5 } });
    expect(error.subtype, '1 of 5 held: nothing is full; the caller is refused for its limit').to.equal('LimitMismatch');
    await holder5.release();
  });

  it('a multiLock tag without a limit is refused (or counted) while permits of that tag are held under a stored limit', async () => {
    const collection = await freshCollection([{ _id: 'page' }]);
    const base = { collection, locktimeouts: { editor: 60_000 } };
    const limited = multiLock({ ...base, limits: { editor: 2 } }); // the new deployment
    const unlimited = multiLock(base); // the old one, during a rolling deploy that introduces the limit
    await limited.acquire({ _id: 'page' }, { tag: 'editor' });
    await limited.acquire({ _id: 'page' }, { tag: 'editor' });
    const third = await unlimited.acquire({ _id: 'page' }, { tag: 'editor' }).then(
      () => 'admitted',
      (error: { subtype?: string }) => error.subtype,
    );
    const seen = await limited.inspect({ _id: 'page' });
    expect(third, 'a caller configured with another limit (none) is refused').to.equal('LimitMismatch');
    expect(seen.permits.editor!.used, 'permits live by the server\'s clock').to.be.at.most(seen.permits.editor!.limit!);
  });

  it('a semaphore\'s permit tag, declared by a multiLock without a limit, is refused while permits are held', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const pool = semaphore({ collection, limit: 1, locktimeout: 60_000 });
    const other = multiLock({ collection, locktimeouts: { permit: 60_000 } }); // "a multiLock on the same document sees it as permit"
    await pool.acquire({ _id: 1 });
    const second = await other.acquire({ _id: 1 }, { tag: 'permit' }).then(
      () => 'admitted',
      (error: { subtype?: string }) => error.subtype,
    );
    const seen = await pool.inspect({ _id: 1 });
    expect(second).to.equal('LimitMismatch');
    expect(seen.permits.permit!.used).to.be.at.most(1);
  });
});

describe('a tag one deployment limits and another declares exclusive (a rolling deploy)', () => {
  const limitedEditor = (collection: Collection<Document>) =>
    multiLock({ collection, locktimeouts: { viewer: 60_000, editor: 60_000 }, limits: { editor: 3 } });
  const exclusiveEditor = (collection: Collection<Document>) =>
    multiLock({ collection, locktimeouts: { viewer: 60_000, editor: 60_000 }, lockRelationships: { editor: { cooperative: ['editor'] } } });
  const liveEditors = async (collection: Collection<Document>): Promise<number> => {
    const doc = await collection.findOne({ _id: 'page' as never });
    return ((doc?.lock?.tags?.editor ?? []) as Array<{ exp: Date }>).filter((entry) => entry.exp.getTime() > Date.now()).length;
  };

  it('a limited acquisition or conversion is refused (LimitMismatch) beside the exclusive holder, also under the limit an earlier use stored', async () => {
    const collection = await freshCollection([{ _id: 'page' }]);
    const limited = limitedEditor(collection);
    const exclusive = exclusiveEditor(collection);
    await (await limited.acquire({ _id: 'page' }, { tag: 'editor' })).release(); // stores limit 3
    const holder = await exclusive.acquire({ _id: 'page' }, { tag: 'editor' });
    const refusal = (promise: Promise<{ release(): Promise<void> }>): Promise<{ subtype: unknown; message: string }> =>
      promise.then(
        (admitted) => ({ subtype: 'admitted beside the exclusive holder', message: '', admitted }),
        (error: Error & { subtype?: unknown }) => ({ subtype: error.subtype, message: error.message }),
      );
    const acquired = await refusal(limited.acquire({ _id: 'page' }, { tag: 'editor' }));
    const viewer = await limited.acquire({ _id: 'page' }, { tag: 'viewer' });
    const converted = await refusal(viewer.convert('editor'));
    const editors = await liveEditors(collection);
    await Promise.all([holder.release(), viewer.release()]);
    expect({ acquired: acquired.subtype, converted: converted.subtype }, `${acquired.message} / ${converted.message}`).to.deep.equal({ acquired: 'LimitMismatch', converted: 'LimitMismatch' });
    expect(acquired.message, 'the refusal says why').to.match(/declares it without a limit/);
    expect(editors, 'one editor lock, the exclusive holder\'s').to.equal(1);
    await (await limited.acquire({ _id: 'page' }, { tag: 'editor' })).release(); // once it is gone, the limited side is admitted again
  });

  it('an exclusive acquisition is refused (LimitMismatch, not waited for) while permits of its tag are held under a limit', async () => {
    const collection = await freshCollection([{ _id: 'page' }]);
    const permit = await limitedEditor(collection).acquire({ _id: 'page' }, { tag: 'editor' });
    const exclusive = exclusiveEditor(collection);
    const fast = await rejectionOf(exclusive.acquire({ _id: 'page' }, { tag: 'editor' }));
    const waited = await rejectionOf(exclusive.acquire({ _id: 'page' }, { tag: 'editor', wait: 5_000 }));
    const editors = await liveEditors(collection);
    await permit.release();
    expect({ fast: fast.subtype, waited: waited.subtype }, `${fast.message} / ${waited.message}`).to.deep.equal({ fast: 'LimitMismatch', waited: 'LimitMismatch' });
    expect(editors, 'only the permit').to.equal(1);
    await (await exclusive.acquire({ _id: 'page' }, { tag: 'editor' })).release(); // once the permit is gone, the exclusive side is admitted
  });
});
