/**
 * Model-based test of the document-lock protocol: fast-check generates sequences of operations
 * (acquire with writeLock and the read/write multiLock, continue an assertive registration,
 * release, commit, extend, forced release, expiry, a fair waiter), runs each against the real
 * library (through its public API, on a real backend) and against spec/support/protocol-model.ts,
 * and fails on the first divergence: an outcome (resolved, error subtype, `err.lock` and its fence,
 * a commit's `data.applied`), the fencing token (handle and `lock.fence`), the entries per tag
 * (which are stored, which are live), the fair queue, or the committed balance.
 *
 * Expiry is not waited for: a test moves an entry's `exp` (and `until`) into the past. Faults:
 * a chosen command's request or reply is lost for good (stress/delayed-collection.ts), under a
 * short `timeout`, so the call fails with DbError; the model states what the library promises then.
 *
 * Fair waiters (`fair: true` with `wait`) run in the background from two more lock objects; after
 * each command, those the model lets win must win, in an order it allows, and the others still wait.
 *
 * Failovers with rollback: every lock writes through a simulated replica set
 * (spec/support/replica-set.ts), and a `failover` puts the documents back to the last majority
 * commit point, losing the writes the primary alone acknowledged after it (plain and forced
 * releases at `releaseW` 1, acquisitions sent with `w: 1`, fair tickets). The documents must then
 * be in a state the model went through since the last write a majority acknowledged to its caller
 * (spec/support/protocol-rollback.ts: no resolved commit is lost, nothing never written appears,
 * no second holder), and the model goes on from there: a release rolled back leaves its lock held
 * until its lease ends, a lock acquired at `w: 1` and rolled back is gone. Fencing tokens are never
 * held by two locks of a document, except a token of an acquisition the rollback lost.
 *
 * MONGLOCK_MODEL_SEED=<seed> repeats a run (the seed is printed), MONGLOCK_MODEL_RUNS sets how many
 * sequences (default 40), MONGLOCK_MODEL_COMMANDS the longest sequence (default 25).
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { Acquire, Commit, Continue, Convert, Extend, ForceRelease, Release, type Command } from '../support/protocol-commands';
import { Expire, Failover, StartWaiter } from '../support/protocol-environment';
import { setup, stats, teardown } from '../support/protocol-harness';
import type { Via } from '../support/protocol-picks';
import { rollbackStats } from '../support/protocol-rollback';
import type { Fault, Tag, Target, Waiter } from '../support/protocol-model';

const faults = fc.oneof(
  { weight: 22, arbitrary: fc.constant<Fault>('none') },
  { weight: 1, arbitrary: fc.constant<Fault>('lostReply') },
  { weight: 1, arbitrary: fc.constant<Fault>('lostRequest') },
);
const targets = fc.constantFrom<Target>('a', 'a', 'a', 'b', 'b', 'b', 'any', 'missing');
const picks = fc.nat({ max: 1_000 });
const vias = fc.constantFrom<Via>('handle', 'handle', 'lock', 'json');

/** One acquisition in four is sent with `w: 1` (as a folded section may be): a failover can roll it back. */
const w1 = fc.constantFrom(false, false, false, true);
const acquireWrite = fc.tuple(targets, fc.boolean(), faults, fc.boolean(), w1).map(([target, fair, fault, withDocument, w]): Command => new Acquire('writeLock', 'write', target, fair, fault, withDocument, 1, w));
const acquireMulti = fc
  .tuple(fc.constantFrom<Tag>('read', 'write'), targets, fc.boolean(), faults, fc.boolean(), w1)
  .map(([tag, target, fair, fault, withDocument, w]): Command => new Acquire('multiLock', tag, target, fair, fault, withDocument, 1, w));
const acquirePermits = fc.tuple(targets, fc.constantFrom(1, 1, 2), faults, fc.boolean(), w1).map(([target, permits, fault, withDocument, w]): Command => new Acquire('semaphore', 'permit', target, false, fault, withDocument, permits, w));
const failover = fc.constant<Command>(new Failover());
const startWaiter = fc.tuple(fc.constantFrom<Waiter['owner']>('fairWriteLock', 'fairMultiLock'), fc.constantFrom<'a' | 'b'>('a', 'b')).map(([owner, doc]): Command => new StartWaiter(owner, doc));
const commandArbitraries: Array<fc.Arbitrary<Command>> = [
  acquireWrite,
  acquireWrite,
  acquireMulti,
  acquireMulti,
  acquireMulti,
  acquireMulti,
  acquirePermits,
  acquirePermits,
  fc.tuple(picks, faults).map(([pick, fault]): Command => new Continue(pick, fault)),
  fc.tuple(picks, vias, faults).map(([pick, via, fault]): Command => new Release(pick, via, fault)),
  fc.tuple(picks, vias, faults).map(([pick, via, fault]): Command => new Release(pick, via, fault)),
  fc.tuple(picks, fc.integer({ min: 1, max: 50 }), vias, faults).map(([pick, amount, via, fault]): Command => new Commit(pick, amount, via, fault)),
  fc.tuple(picks, fc.integer({ min: 1, max: 50 }), vias, faults).map(([pick, amount, via, fault]): Command => new Commit(pick, -amount, via, fault)),
  fc.tuple(picks, vias, faults).map(([pick, via, fault]): Command => new Extend(pick, via, fault)),
  fc.constantFrom<'a' | 'b' | 'missing'>('a', 'a', 'b', 'b', 'missing').map((target): Command => new ForceRelease(target)),
  picks.map((pick): Command => new Convert(pick)),
  picks.map((pick): Command => new Convert(pick)),
  picks.map((pick): Command => new Expire(pick)),
  picks.map((pick): Command => new Expire(pick)),
  startWaiter,
  startWaiter,
  startWaiter,
  failover,
  failover,
];

/** The seed: `MONGLOCK_MODEL_SEED`, else a fresh one (always printed). */
function seedFromEnvironment(): number {
  const given = process.env.MONGLOCK_MODEL_SEED;
  return given === undefined ? Math.floor(Math.random() * 0x7fffffff) : Number(given);
}

describe('the protocol model (fast-check command sequences against the real library)', () => {
  it('every outcome, fence, holder, queue ticket and balance is what the model says', async function () {
    this.timeout(600_000);
    const seed = seedFromEnvironment();
    const runs = Number(process.env.MONGLOCK_MODEL_RUNS ?? 40);
    const maxCommands = Number(process.env.MONGLOCK_MODEL_COMMANDS ?? 25);
    const started = Date.now();
    console.log(`      seed ${seed} (repeat with MONGLOCK_MODEL_SEED=${seed}), ${runs} sequences of up to ${maxCommands} commands`);
    const property = fc.asyncProperty(fc.commands(commandArbitraries, { maxCommands, size: 'max' }), async (commands) => {
      const { model, real } = await setup();
      let passed = false;
      try {
        await fc.asyncModelRun(() => ({ model, real }), commands);
        passed = model.halted === undefined;
      } finally {
        await teardown(model, real, passed);
        if (model.halted) console.log(`      inconclusive, sequence stopped: ${model.halted}`);
      }
    });
    try {
      await fc.assert(property, { seed, numRuns: runs });
    } catch (error) {
      console.log(`      FAILED with seed ${seed}: repeat with MONGLOCK_MODEL_SEED=${seed}`);
      throw error;
    } finally {
      console.log(`      ${stats.sequences} sequences (shrinking included), ${stats.operations} operations, ${stats.faultsFired} lost requests/replies, ${stats.waitersWon} fair waiters won (${stats.contestedHandOvers} hand-overs with several queued; ${stats.waitersReordered} dropped: ticket stamped out of order), ${stats.inconclusive} stopped inconclusive, in ${((Date.now() - started) / 1000).toFixed(1)} s`);
      console.log(
        `      ${rollbackStats.failovers} failovers: ${rollbackStats.lostWrites} lost writes acknowledged below majority, ${rollbackStats.heldAgain} locks held again (their release rolled back), ${rollbackStats.rolledBackLocks} locks acquired at w: 1 rolled back`,
      );
      console.log(`      outcomes ${JSON.stringify(stats.outcomes)}`);
    }
    expect(stats.operations, 'the sequences ran operations').to.be.greaterThan(runs);
    if (runs >= 20) {
      expect(stats.faultsFired, 'some requests or replies were lost').to.be.greaterThan(0);
      expect(stats.waitersWon, 'some fair waiters won').to.be.greaterThan(0);
      expect(rollbackStats.lostWrites, 'some failovers lost writes').to.be.greaterThan(0);
    }
  });
});
