/**
 * `npm run bench:stream-cost`: what change streams cost the backend, in CPU ms (its `/proc`), per
 * uncontended acquire + release of one document: without streams; with 4 streams open on the
 * document, not read; with each of them read after every section (a `getMore` until one comes
 * back empty), with monglock's filter (lib/waiting/lock-changes.ts) and with a bare `$match` on
 * the `_id`; and 4 empty `getMore`s alone. It tells why 4 processes watching one hot document
 * cost a server that matches events in Java (mongo-java-server) more than their lock commands
 * (docs/benchmarks.md, Hot ×16). Each figure is the median of `--rounds` (3) runs of `--sections`
 * (1,000), after a warm-up; the first case is measured again last, as a control.
 */
import { MongoClient, type ChangeStream, type Document } from 'mongodb';
import { writeLock } from '../lib';
import { documentsMatch, lockChanges } from '../lib/waiting/lock-changes';
import { startMongoBackend } from '../support/mongo-backend';
import { median, wholeNumberFlags } from './harness';
import { listenerPid, sampleProcess } from './scale-host';

const STREAMS = 4;

/** `--rounds` and `--sections`, each a whole number of at least 1; anything else is refused (exit 2), naming it, before anything starts. */
function readFlags(argv: readonly string[]): { rounds: number; sections: number } {
  return wholeNumberFlags(argv, { rounds: 3, sections: 1_000 });
}

async function main(): Promise<void> {
  const { rounds, sections } = readFlags(process.argv.slice(2));
  const backend = await startMongoBackend(() => undefined);
  const client = await MongoClient.connect(backend.uri);
  try {
    const pid = listenerPid(backend.uri);
    const backendMs = (): number => (sampleProcess(pid)?.cpuSeconds ?? NaN) * 1_000;
    const collection = client.db('monglock_stream_cost').collection(`c${Date.now()}`);
    await collection.insertOne({ _id: 'hot' } as Document);
    const lock = writeLock({ collection, locktimeout: 10_000, changeStreams: false });
    const section = async (): Promise<void> => (await lock.acquire({ _id: 'hot' })).release();
    /** Backend CPU ms per iteration of `body`: the median over the rounds. */
    const perIteration = async (body: () => Promise<void>): Promise<number> => {
      for (let i = 0; i < sections / 5; i++) await body();
      const figures: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const before = backendMs();
        for (let i = 0; i < sections; i++) await body();
        figures.push((backendMs() - before) / sections);
      }
      return median(figures);
    };
    for (let i = 0; i < 3 * sections; i++) await section(); // the server's JIT warms up
    const rows: Array<[string, number]> = [['acquire + release, no stream', await perIteration(section)]];
    const filters: Array<[string, Document[]]> = [
      ["monglock's filter", [documentsMatch(['hot']), ...lockChanges('lock')]],
      ['a bare $match on the _id', [documentsMatch(['hot'])]],
    ];
    for (const [name, pipeline] of filters) {
      const streams: ChangeStream[] = Array.from({ length: STREAMS }, () => collection.watch(pipeline, { maxAwaitTimeMS: 1 }));
      for (const stream of streams) await stream.tryNext();
      const drain = async (): Promise<void> => {
        for (const stream of streams) while ((await stream.tryNext()) !== null);
      };
      rows.push([`acquire + release, ${STREAMS} streams (${name}) open, not read`, await perIteration(section)]);
      rows.push([`acquire + release, then each of the ${STREAMS} streams (${name}) read until empty`, await perIteration(async () => (await section(), await drain()))]);
      rows.push([`${STREAMS} empty getMores (${name})`, await perIteration(drain)]);
      await Promise.all(streams.map((stream) => stream.close()));
    }
    rows.push(['acquire + release, no stream (again, after the streams closed)', await perIteration(section)]);
    console.log(`backend: ${backend.description}; ${rounds} rounds of ${sections}, median`);
    console.log('| case | backend CPU, ms |\n|---|---|');
    for (const [name, ms] of rows) console.log(`| ${name} | ${ms.toFixed(2)} |`);
  } finally {
    await client.close();
    await backend.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
