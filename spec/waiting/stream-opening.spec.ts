/**
 * A change stream is opened for a caller that waits, never for one that wins at once: a process
 * that takes free locks with `wait` (most calls, in most applications) costs MongoDB no stream.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection, requireCapability, sleep } from '../support/fixture';
import { streamProcess } from '../support/stream-process';

describe('opening a change stream', function () {
  this.timeout(30_000);

  it('an acquisition with wait that wins at once opens no change stream; one that is refused does', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await freshCollection([{ _id: 'free' }, { _id: 'held' }]);
    const process = await streamProcess(collection);
    const lock = writeLock({ collection: process.collection, locktimeout: 10_000 });
    for (let i = 0; i < 5; i++) await (await lock.acquire({ _id: 'free' }, { wait: 5_000 })).release();
    await sleep(300); // a stream opened on the way would show by now
    expect(process.streams.length, 'streams opened by acquisitions that waited for nothing').to.equal(0);
    const holder = await writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: 'held' });
    const waiting = lock.acquire({ _id: 'held' }, { wait: 10_000 });
    await sleep(500);
    await holder.release();
    await (await waiting).release();
    expect(process.streams.length, 'a caller refused, waiting').to.be.at.least(1);
  });
});
