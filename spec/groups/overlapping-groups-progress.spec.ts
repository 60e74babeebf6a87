/**
 * Two groups over the same two documents, in two processes (two lock instances, no local
 * wake-ups between them), with a few ms of network latency. Once nobody else holds anything, one
 * of them must get the whole set promptly: no livelock in which each holds the document the other
 * needs next, lets it go, waits for the one the other just let go, and refuses the other again.
 */
import { expect } from 'chai';
import { acquireAll, writeLock } from '../../lib';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, sleep } from '../support/fixture';

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
