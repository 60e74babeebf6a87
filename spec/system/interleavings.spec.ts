import { expect } from 'chai';
import { checkHistory, type FinalState, type GuardedWrite, type HistoryEvent } from '../../stress/history-checker';
import { checkInterleavings, seedFromEnvironment, summaryOf } from '../../stress/interleavings';
import { mongoBackend } from '../support/fixture';

describe('randomized interleavings (fast-check histories, an independent checker)', () => {
  it('never two exclusive holders, fences increasing (across purge too), guarded writes in token order, no lock left held, every call settled, on one server and on a sharded cluster, with late landings', async function () {
    this.timeout(600_000);
    const seed = seedFromEnvironment();
    const runs = Number(process.env.MONGLOCK_INTERLEAVINGS ?? 8);
    console.log(`      seed ${seed} (repeat with MONGLOCK_SEED=${seed}), ${runs} histories`);
    const report = await checkInterleavings({ uri: mongoBackend().uri, runs, seed, size: { maxClients: 5, maxOperations: 24 }, log: (line) => console.log(`      ${line}`) });
    console.log(`      ${summaryOf(report)}; outcomes ${JSON.stringify(report.outcomes)}; succeeded by kind ${JSON.stringify(report.okByKind)}`);
    expect(report.violations, report.counterexample).to.deep.equal([]);
    expect(report.counterexample).to.equal(undefined);
    expect(report.refusals, 'writes the simulated routers refused for want of the shard key').to.deep.equal([]);
    expect(report.holds, 'the histories held locks').to.be.greaterThan(report.histories);
    expect(report.guardedWrites, 'the holders\' guarded writes landed').to.be.greaterThan(report.histories);
  });
});

describe('the history checker', () => {
  const write = (holder: string, fence: number, mode: GuardedWrite['mode'] = 'exclusive'): GuardedWrite => ({ holder, fence, mode });
  const withLog = (entries: GuardedWrite[], more: Partial<FinalState> = {}): FinalState => ({ liveEntries: [], guardedLogs: [{ target: 'w0', entries }], ...more });
  const rules = (events: HistoryEvent[], final: FinalState): string[] => checkHistory(events, final).map((violation) => violation.rule);

  it('accepts guarded writes of holders one after the other, in token order, and shared holders interleaving', () => {
    const log = [write('a', 1), write('a', 1), write('r1', 2, 'shared'), write('r2', 3, 'shared'), write('r1', 2, 'shared'), write('b', 4), write('b', 4)];
    expect(checkHistory([], withLog(log))).to.deep.equal([]);
  });

  it('reports a hold of a quarantined target that starts before the mark can have ended, and none after it', () => {
    const hold = (holder: string, start: number): HistoryEvent => ({ type: 'hold', target: 'w1', holder, mode: 'exclusive', fence: start, start, end: start + 10 });
    const mark: HistoryEvent = { type: 'quarantine', target: 'w1', landedBy: 1_000, until: 2_500 };
    expect(checkHistory([hold('before', 900), mark, hold('after', 2_600)], { liveEntries: [] }, 50)).to.deep.equal([]);
    expect(checkHistory([mark, hold('during', 1_200)], { liveEntries: [] }, 50).map((violation) => violation.rule)).to.deep.equal(['quarantine']);
    expect(checkHistory([mark, hold('within the skew', 2_480)], { liveEntries: [] }, 50), 'a router ahead may end it early').to.deep.equal([]);
  });

  it('reports a holder whose guarded write landed after a later holder\'s', () => {
    const violations = checkHistory([], withLog([write('a', 1), write('b', 2), write('a', 1)]));
    expect(violations).to.have.length(1);
    expect(violations[0]).to.include({ rule: 'guarded' });
    expect(violations[0]!.detail).to.match(/exclusive a \(fence 1\) wrote \(log #2\) after exclusive b \(fence 2\)/);
  });

  it('reports a guarded write of a later holder that landed before an earlier holder\'s first write, and a reader writing after a writer', () => {
    expect(rules([], withLog([write('b', 2), write('a', 1)]))).to.deep.equal(['guarded']);
    expect(rules([], withLog([write('r', 1, 'shared'), write('w', 2), write('r', 1, 'shared')]))).to.deep.equal(['guarded']);
  });

  it('tells two holds of one owner apart by their tokens', () => {
    expect(rules([], withLog([write('owner-a', 1), write('owner-b', 2), write('owner-a', 3)]))).to.deep.equal([]);
    expect(rules([], withLog([write('owner-a', 3), write('owner-b', 2)]))).to.deep.equal(['guarded']);
  });

  it('reports a holder stamped within the minimum hold of the holder before it, and more permits than the limit stamped within a rate window', () => {
    const stamped = (holder: string, fence: number, stamp: number, more: Partial<HistoryEvent>): HistoryEvent => ({ type: 'hold', target: 'j0', holder, mode: 'exclusive', fence, start: stamp, end: stamp + 1, stamp, ...more }) as HistoryEvent;
    expect(rules([stamped('a', 1, 1_000, { minHold: 300 }), stamped('b', 2, 1_300, { minHold: 300 })], { liveEntries: [] })).to.deep.equal([]);
    expect(rules([stamped('a', 1, 1_000, { minHold: 300 }), stamped('b', 2, 1_299, { minHold: 300 })], { liveEntries: [] })).to.deep.equal(['minHold']);
    const permit = (holder: string, stamp: number): HistoryEvent => stamped(holder, 0, stamp, { mode: 'shared', target: 't0', permits: 1, limit: 2, window: 300 } as Partial<HistoryEvent>);
    expect(rules([permit('a', 0), permit('b', 100), permit('c', 300)], { liveEntries: [] })).to.deep.equal([]);
    expect(rules([permit('a', 0), permit('b', 100), permit('c', 299)], { liveEntries: [] })).to.deep.equal(['rate']);
  });

  it('still reports overlapping exclusive holds, decreasing fences and calls that never settled', () => {
    const hold = (holder: string, fence: number, start: number, end: number): HistoryEvent => ({ type: 'hold', target: 'w0', holder, mode: 'exclusive', fence, start, end });
    expect(rules([hold('a', 1, 0, 10), hold('b', 2, 5, 20)], { liveEntries: [] })).to.deep.equal(['exclusion']);
    expect(rules([hold('a', 2, 0, 10), hold('b', 1, 15, 20)], { liveEntries: [] })).to.deep.equal(['fencing']);
    expect(rules([{ type: 'settled', op: 0, kind: 'writeLock', outcome: 'unsettled', at: 1 }], { liveEntries: [] })).to.deep.equal(['liveness']);
  });
});
