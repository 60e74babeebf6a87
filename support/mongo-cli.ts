/**
 * `npm run mongo`: starts the MongoDB backend the tests use (MONGODB_URI, else a real mongod from
 * mongodb-memory-server, else the offline fallback), prints `MONGODB_URI=<uri>` when ready, and
 * stops it on SIGINT/SIGTERM.
 */
import { startMongoBackend } from './mongo-backend';

async function main(): Promise<void> {
  const backend = await startMongoBackend((line) => console.error(line));
  console.error(`backend: ${backend.description}`);
  console.log(`MONGODB_URI=${backend.uri}`);
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    console.error(`${signal}: stopping ${backend.kind} backend`);
    backend.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(error);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  setInterval(() => undefined, 1 << 30);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
