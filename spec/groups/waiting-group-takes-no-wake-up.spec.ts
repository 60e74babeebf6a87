/**
 * A group that waits for a later document without taking it hands on the wake-up a release in this
 * process gives it. That wake-up must reach a waiter the release freed: not one that already holds
 * a wake-up (a release of several permits), nor one that the released tag never blocked.
 */
import { expect } from 'chai';
import { acquireAll, multiLock, semaphore, writeLock } from '../../lib';
import { freshCollection, sleep } from '../support/fixture';

describe('acquireAll: a group waiting for a later document hands its wake-up to a waiter the release freed', function () {
  this.timeout(30_000);

  /**
   * Two single waiters (one permit each) of a full semaphore document held by one holder of two
   * permits; optionally a group that waits there first (refused at it, its first document then
   * held elsewhere). Returns how long after the release each waiter acquired.
   */
  async function handOver(withGroup: boolean): Promise<number[]> {
    const docs = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const pool = semaphore({ collection: docs, field: 'quota', limit: 2, locktimeout: 60_000 });
    const locks = writeLock({ collection: docs, locktimeout: 60_000 });
    const elsewhere = writeLock({ collection: docs, locktimeout: 60_000 }); // another process
    const holder = await pool.acquire({ _id: 2 }, { permits: 2 });
    const controller = new AbortController();
    let group: Promise<unknown> = Promise.resolve();
    if (withGroup) {
      // Takes 1, is refused at 2 (full), lets 1 go and waits for 2 without taking it.
      group = acquireAll([{ lock: locks, filter: { _id: 1 } }, { lock: pool, filter: { _id: 2 } }], { wait: 20_000, signal: controller.signal }).catch(() => undefined);
      await sleep(60);
    }
    // Its first document is then held in another process: once woken, it waits there.
    const blocker = await elsewhere.acquire({ _id: 1 });
    const released = { at: 0 };
    const waiter = async (): Promise<number> => {
      const handle = await pool.acquire({ _id: 2 }, { wait: 20_000 });
      const took = Date.now() - released.at;
      setTimeout(() => void handle.release(), 1_000);
      return took;
    };
    const first = waiter();
    await sleep(5);
    const second = waiter();
    await sleep(150);
    released.at = Date.now();
    await holder.release();
    const took = await Promise.all([first, second]);
    controller.abort(new Error('done'));
    await group;
    await blocker.release();
    return took;
  }

  it('control: without a group, both waiters acquire soon after two permits are released', async () => {
    const took = await handOver(false);
    expect(Math.max(...took), `ms after the release: ${took.join(', ')}`).to.be.below(300);
  });

  it('with a group waiting there first, both waiters still acquire soon after two permits are released', async () => {
    const took = await handOver(true);
    expect(Math.max(...took), `ms after the release: ${took.join(', ')}`).to.be.below(300);
  });

  /**
   * A multiLock document held here by tags `x` and `y`; a waiter for `b` (blocked by `y`) and then
   * one for `a` (blocked by `x`); optionally a group that waits for `a` there first. Resolves how
   * long after `x` is released the waiter for `a` acquired.
   */
  async function releaseOfX(withGroup: boolean): Promise<number> {
    const docs = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const tags = multiLock({
      collection: docs,
      field: 'tags',
      locktimeouts: { a: 60_000, b: 60_000, x: 60_000, y: 60_000 },
      lockRelationships: { a: { cooperative: ['x'] }, b: { cooperative: ['y'] } },
    });
    const locks = writeLock({ collection: docs, locktimeout: 60_000 });
    const elsewhere = writeLock({ collection: docs, locktimeout: 60_000 }); // another process
    const [x, y] = await Promise.all([tags.acquire({ _id: 2 }, { tag: 'x' }), tags.acquire({ _id: 2 }, { tag: 'y' })]);
    const controller = new AbortController();
    let group: Promise<unknown> = Promise.resolve();
    if (withGroup) {
      group = acquireAll([{ lock: locks, filter: { _id: 1 } }, { lock: tags, tag: 'a', filter: { _id: 2 } }], { wait: 20_000, signal: controller.signal }).catch(() => undefined);
      await sleep(60);
    }
    const blocker = await elsewhere.acquire({ _id: 1 });
    const forB = tags.acquire({ _id: 2 }, { tag: 'b', wait: 20_000 }).catch(() => undefined);
    await sleep(5);
    const released = { at: 0 };
    const forA = tags.acquire({ _id: 2 }, { tag: 'a', wait: 20_000 }).then((handle) => {
      const took = Date.now() - released.at;
      void handle.release();
      return took;
    });
    await sleep(300);
    released.at = Date.now();
    await x.release();
    const took = await forA;
    controller.abort(new Error('done'));
    await y.release();
    await Promise.all([group, forB.then((handle) => handle?.release())]);
    await blocker.release();
    return took;
  }

  it('control: without a group, the release of x wakes the waiter for a at once', async () => {
    const took = await releaseOfX(false);
    expect(took, `ms after the release`).to.be.below(300);
  });

  it('with a group waiting for a there first, the release of x still reaches the waiter for a at once', async () => {
    const took = await releaseOfX(true);
    expect(took, `ms after the release`).to.be.below(300);
  });
});
