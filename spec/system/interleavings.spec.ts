import { expect } from 'chai';
import { checkInterleavings, seedFromEnvironment } from '../../stress/interleavings';
import { mongoBackend } from '../support/fixture';

describe('randomized interleavings (fast-check histories, an independent checker)', () => {
  it('never two exclusive holders, fences increasing (across purge too), no lock left held, every call settled', async function () {
    this.timeout(600_000);
    const seed = seedFromEnvironment();
    const runs = Number(process.env.MONGLOCK_INTERLEAVINGS ?? 8);
    console.log(`      seed ${seed} (repeat with MONGLOCK_SEED=${seed}), ${runs} histories`);
    const report = await checkInterleavings({ uri: mongoBackend().uri, runs, seed, size: { maxClients: 5, maxOperations: 24 }, log: (line) => console.log(`      ${line}`) });
    console.log(`      ${report.histories} histories, ${report.operations} operations, ${report.holds} holds checked, ${report.handOvers} hand-overs; outcomes ${JSON.stringify(report.outcomes)}; succeeded by kind ${JSON.stringify(report.okByKind)}`);
    expect(report.violations, report.counterexample).to.deep.equal([]);
    expect(report.counterexample).to.equal(undefined);
    expect(report.holds, 'the histories held locks').to.be.greaterThan(report.histories);
  });
});
