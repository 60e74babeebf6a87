/**
 * One OS process of the transfer check: its own driver client, `workers` workers, each doing
 * `transfers` transfers of 1 between two accounts (`a` → `b` or `b` → `a`, at random) with
 * `usingAll` + `commitAll`, waiting as long as it takes. First and last thing in each section,
 * a guarded write stamps the server's clock (`$currentDate`) into each document's
 * `visits.<group id>.first` / `.last`, only while its lock is held; each hold (group, document,
 * fence) goes to stdout as one JSON line, which the parent checks against the documents.
 * Usage: transfer-worker.ts <json settings>
 */
import { MongoClient } from 'mongodb';
import { commitAll, usingAll, writeLock } from 'monglock';

export interface TransferSettings {
  readonly uri: string;
  readonly db: string;
  readonly collection: string;
  readonly workers: number;
  readonly transfers: number;
}

/** One member of one group, as the worker saw it. */
export interface HoldRecord {
  readonly group: string;
  readonly account: string;
  readonly fence: number;
}

async function main(settings: TransferSettings): Promise<void> {
  const client = new MongoClient(settings.uri);
  await client.connect();
  const accounts = client.db(settings.db).collection(settings.collection);
  const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
  const worker = async (): Promise<void> => {
    for (let i = 0; i < settings.transfers; i++) {
      const [from, to] = Math.random() < 0.5 ? ['a', 'b'] : ['b', 'a'];
      await usingAll([{ lock, filter: { _id: from } }, { lock, filter: { _id: to } }], { wait: 120_000 }, async (group) => {
        const accountOf = (n: number): string => (n === 0 ? from! : to!);
        // Stamped twice per document, first and last thing in the section, each only while its lock is held.
        for (const stamp of ['first', 'last']) {
          for (const [n, handle] of group.entries()) {
            const stamped = await accounts.updateOne(handle.guard(), { $currentDate: { [`visits.${group.id}.${stamp}`]: true } });
            if (stamped.matchedCount !== 1) throw new Error(`the guarded write of a held lock matched nothing (${accountOf(n)})`);
          }
        }
        for (const [n, handle] of group.entries()) {
          const record: HoldRecord = { group: group.id, account: accountOf(n), fence: handle.fence };
          process.stdout.write(`${JSON.stringify(record)}\n`);
        }
        return commitAll([{ $inc: { balance: -1 } }, { $inc: { balance: 1 } }]);
      });
    }
  };
  try {
    await Promise.all(Array.from({ length: settings.workers }, worker));
  } finally {
    await client.close();
  }
}

main(JSON.parse(process.argv[2]!) as TransferSettings).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
