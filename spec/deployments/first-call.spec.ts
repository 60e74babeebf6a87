/**
 * A lock's first call learns the deployment (lib/engine/deployment.ts: is it a sharded cluster,
 * what is the collection's shard key) before it writes. Callers that come together then wait for
 * that answer, in as many reactions as there are callers; a caller that starts while the answer is
 * being taken in must run with it too: its reply carries the shard key, and its release and
 * extensions find the document by it.
 *
 * Simulated: a mongos (stress/simulated-cluster.ts) whose `config.collections` answer is given by
 * the test, which starts a second caller `n` reactions after that answer, for every `n` around it.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../../lib';
import { simulatedCluster } from '../../stress/simulated-cluster';
import { freshCollection } from '../support/fixture';
import { liveEntries, until } from '../support/lock-commands';

const SHARD_KEY = { region: 1, _id: 1 };

/** Calls `then` after `n` reactions. */
function afterReactions(n: number, then: () => void): void {
  let turn: Promise<void> = Promise.resolve();
  for (let i = 0; i < n; i++) turn = turn.then(() => undefined);
  void turn.then(then);
}

/** Acquires and releases the lock on the document `filter` selects; resolves what happened. */
function acquireAndRelease(lock: ReturnType<typeof writeLock>, filter: Document): Promise<string> {
  return lock.acquire(filter).then(
    (held) => held.release().then(() => 'released', (error: Error) => `release failed: ${error.message}`),
    (error: Error) => `acquire failed: ${error.message}`,
  );
}

describe('callers that come together on a lock\'s first call, on a sharded collection', () => {
  it('a caller that starts while the deployment\'s answer is being taken in runs with its shard key, and releases its lock', async function () {
    this.timeout(120_000);
    const failures: string[] = [];
    for (let n = 0; n <= 16; n++) {
      const raw = await freshCollection([{ _id: 'a', region: 'eu' }, { _id: 'b', region: 'eu' }]);
      let second: Promise<string> | undefined;
      const cluster = simulatedCluster(raw, {
        routers: [{ offsetMs: 0 }],
        shardKey: SHARD_KEY,
        shardKeyAnswer: (namespace) => {
          const answer = Promise.resolve({ _id: namespace, key: SHARD_KEY } as Document);
          // Asked on the lock's first call, once `lock` exists.
          void answer.then(() => afterReactions(n, () => (second = acquireAndRelease(lock, { _id: 'b', region: 'eu' }))));
          return answer;
        },
      });
      const lock = writeLock({ collection: cluster, locktimeout: 20_000 });
      const first = await acquireAndRelease(lock, { _id: 'a', region: 'eu' });
      const started = await until(() => second !== undefined, 5_000);
      expect(started, `the second caller started ${n} reactions after the deployment's answer (first: ${first})`).to.equal(true);
      const outcome = await second!;
      const left = (await liveEntries(raw, 'b')).length;
      if (first !== 'released' || outcome !== 'released' || left !== 0) failures.push(`second caller ${n} reactions after the answer: first ${first}; second ${outcome}; live entries on its document ${left}`);
    }
    expect(failures).to.deep.equal([]);
  });
});
