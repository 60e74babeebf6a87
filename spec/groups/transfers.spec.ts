/**
 * Transfers a → b and b → a at once, from several processes, with `usingAll` + `commitAll`: all
 * finish (no deadlock), money is conserved, and by the server's clock no two groups ever held a
 * common document, while each group held both of its documents at one instant.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { HoldRecord, TransferSettings } from '../../stress/transfer-worker';
import { freshCollection, mongoBackend } from '../support/fixture';

const run = promisify(execFile);
const PROCESSES = 3;
const WORKERS = 4;
const TRANSFERS = 12;


describe('transfers between two accounts from several processes (usingAll + commitAll)', () => {
  it('all finish, money is conserved, and no two groups ever hold a common document', async function () {
    this.timeout(240_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 1_000 }, { _id: 'b', balance: 1_000 }]);
    const settings: TransferSettings = { uri: mongoBackend().uri, db: accounts.dbName, collection: accounts.collectionName, workers: WORKERS, transfers: TRANSFERS };
    const outputs = await Promise.all(
      Array.from({ length: PROCESSES }, () =>
        run(process.execPath, ['--import', 'tsx', join('stress', 'transfer-worker.ts'), JSON.stringify(settings)], {
          cwd: join(__dirname, '..', '..'),
          maxBuffer: 10_000_000,
          timeout: 200_000,
        }),
      ),
    );
    const holds = outputs.flatMap(({ stdout }) => stdout.trim().split('\n').map((line) => JSON.parse(line) as HoldRecord));
    const total = PROCESSES * WORKERS * TRANSFERS;
    expect(holds.length, 'every transfer held both accounts').to.equal(2 * total);

    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    expect(docs.reduce((sum, doc) => sum + (doc.balance as number), 0), 'money is conserved').to.equal(2_000);
    expect(docs.map((doc) => doc.lock.tags.write.length), 'nothing left held').to.deep.equal([0, 0]);
    const landed = docs.map((doc) => new Set((doc.lock.committed as Array<{ group: string }>).map((record) => record.group)));

    // Each group's stamps in a document, by the server's clock, each written by a guarded write (so while the group held it).
    const visitsOf = new Map(docs.map((doc) => [doc._id as unknown as string, doc.visits as Record<string, { first: Date; last: Date }>]));
    for (const [account, visits] of visitsOf) expect(Object.keys(visits).length, account).to.equal(total);
    const visitOf = (group: string, account: string): { first: number; last: number } => {
      const { first, last } = visitsOf.get(account)![group]!;
      return { first: first.getTime(), last: last.getTime() };
    };
    // Per document, in fence order: the next holder's first stamp is never before the previous holder's last one.
    for (const account of ['a', 'b']) {
      const ordered = holds.filter((hold) => hold.account === account).sort((x, y) => x.fence - y.fence);
      for (let i = 1; i < ordered.length; i++) {
        const [before, after] = [ordered[i - 1]!, ordered[i]!];
        expect(after.fence).to.be.greaterThan(before.fence);
        expect(visitOf(after.group, account).first, `${account}: two holders at once`).to.be.at.least(visitOf(before.group, account).last);
      }
    }
    // Per group: both documents held at one instant (every first stamp before every last one).
    const groups = new Set(holds.map((hold) => hold.group));
    expect(groups.size).to.equal(total);
    for (const group of groups) {
      const members = holds.filter((hold) => hold.group === group).map((hold) => visitOf(group, hold.account));
      expect(Math.max(...members.map((m) => m.first)), `group ${group} held both documents at once`).to.be.at.most(Math.min(...members.map((m) => m.last)));
    }
    console.log(`      ${total} transfers by ${PROCESSES} processes x ${WORKERS} workers; the last ${landed[0]!.size} commit records of each account name their group`);
  });
});
