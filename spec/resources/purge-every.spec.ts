/**
 * `purgeEvery(ms)` with purges slower than the interval: one purge at a time, a tick that finds
 * one running is skipped (no backlog), and `stop()` waits for the run in flight only: no purge
 * starts once `stop()` was called.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { resourceLocks } from '../../lib';
import { wrapWrites } from '../../stress/server-faults';
import { freshCollection, sleep } from '../support/fixture';

/** How long each purge's deletion is held back, in ms: far longer than the interval. */
const SLOW_DELETE = 150;
const INTERVAL = 10;

describe('purgeEvery with purges slower than its interval', () => {
  it('runs one purge at a time, skips the ticks that find one running, and starts none after stop()', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const log: string[] = [];
    let inFlight = 0;
    let mostInFlight = 0;
    // A purge begins with its clock read (a findOneAndUpdate on the clock document) and ends with its deleteMany.
    const slow = wrapWrites(collection, async (method, args, _n, send) => {
      const isClockRead = method === 'findOneAndUpdate' && (args[0] as Document | undefined)?._id?.monglock === 'clock';
      if (isClockRead) {
        log.push('start');
        mostInFlight = Math.max(mostInFlight, ++inFlight);
      }
      if (method !== 'deleteMany') return send(args);
      await sleep(SLOW_DELETE);
      try {
        return await send(args);
      } finally {
        inFlight--;
        log.push('end');
      }
    });
    const locks = resourceLocks({ collection: slow });
    await locks.xlock('r', 'job', { ttl: 100 }); // something to purge once it expired
    const errors: unknown[] = [];
    const loop = locks.purgeEvery(INTERVAL, (error) => errors.push(error));
    for (let i = 0; i < 500 && log.filter((event) => event === 'end').length < 3; i++) await sleep(20);
    expect(log.filter((event) => event === 'end').length, 'three purges ran').to.be.at.least(3);

    log.push('stop');
    await loop.stop();
    log.push('stopped');
    await sleep(SLOW_DELETE + 10 * INTERVAL); // a purge queued or ticked after stop() would start now

    const afterStop = log.slice(log.indexOf('stop'));
    const count = (event: string): number => afterStop.filter((e) => e === event).length;
    const seen = `after stop(): ${count('start')} starts, ${count('end')} ends`;
    expect(count('start'), `no purge starts once stop() was called (${seen})`).to.equal(0);
    expect(count('end'), `stop() waited for the run in flight, and only it (${seen})`).to.be.at.most(1);
    expect(afterStop.at(-1), `stop() resolved after the run in flight ended (${seen})`).to.equal('stopped');
    expect(mostInFlight, 'never two purges at once').to.equal(1);
    expect(errors, 'no purge failed').to.deep.equal([]);
  });
});
