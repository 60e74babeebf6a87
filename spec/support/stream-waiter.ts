/**
 * A child process for the change-feed specs: waits on a held writeLock with its change stream
 * open, and prints one JSON line `{"cursorId":"<id>"}` (the stream's server cursor) once that
 * cursor exists, then goes on waiting until it is killed (or its wait ends: it then exits 1).
 */
import { MongoClient, type ChangeStream } from 'mongodb';
import { writeLock } from '../../lib';
import { watchedCollection } from './watched-collection';

interface Settings {
  uri: string;
  db: string;
  collection: string;
  id: unknown;
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as Settings;
  const client = await MongoClient.connect(settings.uri);
  const streams: ChangeStream[] = [];
  const collection = watchedCollection(client, client.db(settings.db).collection(settings.collection), (stream) => (streams.push(stream), stream));
  const waiting = writeLock({ collection, locktimeout: 10_000 }).acquire({ _id: settings.id }, { wait: 60_000 });
  waiting.catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
  for (;;) {
    const id = (streams[0] as unknown as { cursor?: { id?: { isZero(): boolean; toString(): string } | null } } | undefined)?.cursor?.id;
    if (id && !id.isZero()) {
      console.log(JSON.stringify({ cursorId: id.toString() }));
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await waiting;
  process.exit(1); // it was meant to be killed while waiting
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
