/**
 * acquireAll with `wait`: groups that wait make progress, and a group waiting for a later document
 * passes on the wake-ups of releases in its process to the waiters they freed.
 */
import { expect } from 'chai';
import { acquireAll, multiLock, semaphore, writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, sleep } from '../support/fixture';

/**
 * Two groups over the same two documents, in two processes (two lock instances, no local
 * wake-ups between them), with a few ms of network latency. Once nobody else holds anything, one
 * of them must get the whole set promptly: no livelock in which each holds the document the other
 * needs next, lets it go, waits for the one the other just let go, and refuses the other again.
 */
/**
 * Rounds tried (it stops at the first that livelocks), and what "promptly" means: a round takes
 * 4 to 8 lock commands once the holders let go (a livelocked one took hundreds), and well under a
 * second on an idle machine (it is judged by commands, which a loaded machine does not inflate,
 * and by time only far beyond what load explains).
 */
const ROUNDS = 60;
const FEW_COMMANDS = 40;
const PROMPTLY = 3_000;

describe('acquireAll: two groups over one set make progress', function () {
  this.timeout(120_000);

  it('a group waiting for its second document and a group waiting for its first both get the set soon after the single holders let go', async () => {
    const report: string[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const accounts = await freshCollection([{ _id: 'a' }, { _id: 'b' }]);
      let commands = 0;
      // 5 ms on the way to the server for every lock command.
      const network = delayedCollection(accounts, {
        request: (method) => {
          if (method === 'findOneAndUpdate') commands++;
          return method === 'findOneAndUpdate' || method === 'updateOne' ? 5 : undefined;
        },
      });
      const processA = writeLock({ collection: network, locktimeout: 60_000 });
      const processB = writeLock({ collection: network, locktimeout: 60_000 });
      const single = writeLock({ collection: accounts, locktimeout: 60_000 });
      const set = (lock: typeof single) => [{ lock, filter: { _id: 'a' } }, { lock, filter: { _id: 'b' } }] as const;
      const outcome = (pending: Promise<{ release(): Promise<void> }>) =>
        pending.then(
          async (group) => {
            await group.release();
            return 'done';
          },
          (error: Error) => `failed: ${error.message}`,
        );
      // b is held: group A takes a, is refused at b, lets a go and waits for b (holding nothing).
      const holdsB = await single.acquire({ _id: 'b' });
      const a = outcome(acquireAll(set(processA), { wait: 3_000 }));
      await sleep(100);
      // a is then held by someone else: group B is refused at a (taken alone) and waits for it.
      const holdsA = await single.acquire({ _id: 'a' }, { wait: 2_000 });
      const b = outcome(acquireAll(set(processB), { wait: 3_000 }));
      await sleep(100);
      const sentBefore = commands;
      const released = Date.now();
      await Promise.all([holdsA.release(), holdsB.release()]);
      const [ra, rb] = await Promise.all([a, b]);
      const took = Date.now() - released;
      const line = `round ${round}: A ${ra}, B ${rb}, ${took} ms and ${commands - sentBefore} lock commands after the holders let go`;
      report.push(line);
      if (ra !== 'done' || rb !== 'done' || took > PROMPTLY || commands - sentBefore > FEW_COMMANDS) break;
    }
    const last = report[report.length - 1]!;
    const [, took, sent] = /, (\d+) ms and (\d+) lock commands/.exec(last)!;
    expect(report.length === ROUNDS && !/failed/.test(last) && Number(took) <= PROMPTLY && Number(sent) <= FEW_COMMANDS, report.slice(-3).join('\n')).to.equal(true);
  });
});

/**
 * A group that waits for a later document without taking it hands on the wake-up a release in this
 * process gives it. That wake-up must reach a waiter the release freed: not one that already holds
 * a wake-up (a release of several permits), nor one that the released tag never blocked.
 */
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
    // Each waiter holds its permit a second, then releases it: awaited before the test ends (a release left running
    // past the file's end met a closed client and crashed the worker with an unhandled rejection).
    const releases: Array<Promise<void>> = [];
    const waiter = async (): Promise<number> => {
      const handle = await pool.acquire({ _id: 2 }, { wait: 20_000 });
      const took = Date.now() - released.at;
      releases.push(sleep(1_000).then(() => handle.release()));
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
    await Promise.all(releases);
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
    let releasedA: Promise<void> = Promise.resolve();
    const forA = tags.acquire({ _id: 2 }, { tag: 'a', wait: 20_000 }).then((handle) => {
      const took = Date.now() - released.at;
      releasedA = handle.release();
      return took;
    });
    await sleep(300);
    released.at = Date.now();
    await x.release();
    const took = await forA;
    controller.abort(new Error('done'));
    await y.release();
    await Promise.all([group, forB.then((handle) => handle?.release()), releasedA]);
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
