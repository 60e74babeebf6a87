/**
 * minHold on an owner's nested hold (reentrant locks): the owner already holds the lock, and asks
 * for a nested hold with minHold (a run-once job inside a larger section of the same owner).
 * Before it was refused with a TypeError, the nested hold is taken without its minimum hold (handle.minHoldUntil is
 * undefined, the entry has no hold), and once the owner's holds are released another caller
 * acquires within the minimum hold: the minHold asked for is silently dropped. docs/api.md says "a
 * nested hold of an owner (re-entry) takes no minimum hold of its own", but the call is not told:
 * a run-once job whose caller nests it in a section of its owner runs again 34 ms later.
 */
import { expect } from 'chai';
import { writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';

describe('minHold on an owner\'s nested hold', function () {
  this.timeout(30_000);

  it('a nested hold asked with minHold keeps the document taken until timestamp + minHold (or is refused before anything is written)', async () => {
    const collection = await freshCollection([{ _id: 1 }]);
    const lock = writeLock({ collection, locktimeout: 20_000 });
    const outer = await lock.acquire({ _id: 1 }, { owner: 'section' });
    const outcome = await lock.acquire({ _id: 1 }, { owner: 'section', minHold: 10_000 }).then(
      async (inner) => {
        const asked = inner.minHoldUntil;
        await inner.release();
        await outer.release();
        const other = await lock.acquire({ _id: 1 }).then(
          async (handle) => (await handle.release(), `another caller acquired ${handle.timestamp - inner.timestamp} ms after the nested hold`),
          (error: { subtype?: string }) => `another caller refused: ${error.subtype}`,
        );
        return `nested minHoldUntil ${asked === undefined ? 'undefined' : asked - inner.timestamp}; ${other}`;
      },
      async (error: Error) => (await outer.release(), `refused: ${error.name}`),
    );
    expect(outcome, outcome).to.be.oneOf(['nested minHoldUntil 10000; another caller refused: LockAlreadyTaken', 'refused: TypeError']);
  });
});
