/**
 * A child process for the change-feed specs: waits on a held writeLock with its change stream
 * open, and prints one JSON line `{"cursorId":"<id>"}` (the stream's server cursor) once that
 * cursor exists, then goes on waiting until it is killed (or its wait ends: it then exits 1).
 */
import { MongoClient, type ChangeStream, type Collection, type Document } from 'mongodb';
import { writeLock } from '../../lib';

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
  const plain = client.db(settings.db).collection(settings.collection);
  const collection = new Proxy(plain, {
    get(target, key) {
      if (key === 'watch') {
        return (...args: Parameters<Collection<Document>['watch']>) => {
          const stream = target.watch(...args);
          streams.push(stream);
          return stream;
        };
      }
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
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
