/**
 * Review of issue 31 §1 (convert: signal aborts): a release sent after an aborted conversion landed late.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, type LockHandle } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { gate, isPlainRelease } from '../support/lock-commands';
import { freshCollection, sleep } from '../support/fixture';

const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } };

/** A conversion's write: it moves the entry (+1 on the fence) and takes its own upgrade mark out. */
const isConversion = (method: string, args: readonly unknown[]): boolean =>
  method === 'findOneAndUpdate' && (args[1] as Document).$inc?.['lock.fence'] === 1 && (args[1] as Document).$pull?.['lock.upgrade'] !== undefined;

async function storedEntries(collection: Collection<Document>, _id: unknown): Promise<Array<{ tag: string; id: string; exp: Date }>> {
  const doc = await collection.findOne({ _id: _id as never });
  const tags = (doc?.lock?.tags ?? {}) as Record<string, Array<{ id: string; exp: Date }>>;
  return Object.entries(tags).flatMap(([tag, entries]) => entries.map((entry) => ({ tag, id: entry.id, exp: entry.exp })));
}

describe('review 31: a release after an aborted conversion that lands late', () => {
  it('a release sent after the aborted conversion landed (and before it was undone) releases the lock: it is not refused as not held, and nothing is left', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const conversionReply = gate();
    const releaseWay = gate();
    let conversions = 0;
    let releaseHeld = false;
    const slow = delayedCollection(collection, {
      // The release takes a slow way there: it reaches the server after the conversion.
      request: (method, _n, args) => {
        if (!isPlainRelease(method, args) || releaseHeld) return undefined;
        releaseHeld = true;
        return releaseWay.promise;
      },
      // The first conversion's reply takes a slow way back (the server applied it): the caller aborts meanwhile.
      reply: (method, _n, args) => (isConversion(method, args) && ++conversions === 1 ? conversionReply.promise : undefined),
    });
    const rw = multiLock({ collection: slow, locktimeouts: { read: 60_000, write: 60_000 }, lockRelationships: relationships });
    const handle: LockHandle = await rw.acquire({ _id: 'doc' }, { tag: 'read' });
    const controller = new AbortController();
    const converting = handle.convert('write', { wait: 5_000, signal: controller.signal });
    for (let i = 0; i < 250 && conversions === 0; i++) await sleep(20);
    controller.abort(new Error('the caller gave up'));
    const rejected = await converting.then(
      () => 'resolved',
      (error: Error) => error.message,
    );
    // The caller, told its conversion failed, lets its read lock go.
    const releasing = handle.release().then(
      () => 'released',
      (error: Error & { subtype?: string }) => `${error.subtype}: ${error.message}`,
    );
    for (let i = 0; i < 250 && !releaseHeld; i++) await sleep(20);
    const whenReleaseSent = (await storedEntries(collection, 'doc')).map((entry) => entry.tag);
    releaseWay.open(); // the release reaches the server: the lock is a write lock there now
    await sleep(200);
    conversionReply.open(); // the conversion's reply arrives: the run undoes it
    const released = await releasing;
    await sleep(300);
    const left = (await storedEntries(collection, 'doc')).filter((entry) => entry.id === handle.id && entry.exp.getTime() > Date.now()).map((entry) => entry.tag);
    expect({ rejected, whenReleaseSent }, 'the conversion was aborted, and had landed when the release was sent').to.deep.equal({ rejected: 'the caller gave up', whenReleaseSent: ['write'] });
    expect({ released, left, tag: handle.tag }, 'the release the caller asked for released the lock: nothing of it is left').to.deep.equal({ released: 'released', left: [], tag: 'read' });
  });
});
