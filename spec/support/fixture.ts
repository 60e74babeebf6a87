/**
 * Mocha root hooks: resolves the MongoDB backend once (MONGLOCK_BACKEND, else MONGODB_URI, else a
 * real mongod from mongodb-memory-server, else the offline fallback), prints which one answers and
 * which driver talks to it, gives each test fresh collections and drops them afterwards.
 */
import { randomBytes } from 'node:crypto';
import { BSON, MongoClient, type Collection, type CommandStartedEvent, type Db, type Document } from 'mongodb';
import { startMongoBackend, type BackendCapabilities, type MongoBackend } from '../../support/mongo-backend';

let backend: MongoBackend | undefined;
let client: MongoClient | undefined;
let created: string[] = [];
const started: CommandStartedEvent[] = [];
const extraClients: MongoClient[] = [];

export const DB_NAME = 'monglock_spec';

export const mochaHooks = {
  async beforeAll(this: Mocha.Context): Promise<void> {
    this.timeout(240_000);
    backend = await startMongoBackend((line) => console.log(`  [backend] ${line}`));
    console.log(`  [backend] tests run on ${backend.description} with the Node.js driver ${driverVersion()}`);
    client = new MongoClient(backend.uri, { monitorCommands: true });
    client.on('commandStarted', (event) => started.push(event));
    await client.connect();
  },
  async afterEach(): Promise<void> {
    const db = client?.db(DB_NAME);
    await Promise.all(created.map((name) => db?.collection(name).drop().catch(() => undefined)));
    created = [];
  },
  async afterAll(this: Mocha.Context): Promise<void> {
    this.timeout(30_000);
    await Promise.all(extraClients.map((extra) => extra.close().catch(() => undefined)));
    await client?.db(DB_NAME).dropDatabase().catch(() => undefined);
    await client?.close();
    await backend?.stop();
  },
};

/** The version of the driver `mongodb` resolves to (driver 7 under MONGLOCK_DRIVER=7: support/driver-select.cjs); throws if that switch did not take. */
export function driverVersion(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { version } = require('mongodb/package.json') as { version: string };
  const wanted = process.env.MONGLOCK_DRIVER;
  if (wanted && !version.startsWith(`${wanted}.`)) {
    throw new Error(`MONGLOCK_DRIVER=${wanted} but mongodb resolves to ${version}: run with NODE_OPTIONS="--require ./support/driver-select.cjs"`);
  }
  return version;
}

/** The backend in use. */
export function mongoBackend(): MongoBackend {
  if (!backend) throw new Error('The MongoDB backend is not started (is spec/support/fixture.ts a mocha root hook?)');
  return backend;
}

/** The shared, command-monitored client. */
export function mongoClient(): MongoClient {
  if (!client) throw new Error('The MongoDB client is not connected');
  return client;
}

/** The test database. */
export function testDb(): Db {
  return mongoClient().db(DB_NAME);
}

/** A new, empty collection (dropped after the test), optionally filled with `docs`. */
export async function freshCollection(docs: Document[] = []): Promise<Collection<Document>> {
  const name = `c_${randomBytes(6).toString('hex')}`;
  created.push(name);
  const collection = testDb().collection(name);
  if (docs.length > 0) await collection.insertMany(docs.map((doc) => ({ ...doc })));
  return collection;
}

/** A further client of its own (closed after the run), for tests with several independent clients. */
export async function newClient(options: ConstructorParameters<typeof MongoClient>[1] = {}): Promise<MongoClient> {
  const extra = new MongoClient(mongoBackend().uri, options);
  await extra.connect();
  extraClients.push(extra);
  return extra;
}

/** Runs `body` and returns the commands the shared client sent meanwhile (names, for example `findAndModify`). */
export async function commandsSentBy<T>(body: () => Promise<T>): Promise<{ result: T | undefined; error: unknown; commands: string[] }> {
  const from = started.length;
  let result: T | undefined;
  let error: unknown;
  try {
    result = await body();
  } catch (caught) {
    error = caught;
  }
  const commands = started.slice(from).map((event) => event.commandName).filter((name) => !['isMaster', 'hello', 'ismaster', 'endSessions'].includes(name));
  return { result, error, commands };
}

/** Skips the current test, printing why, when the backend lacks `capability`. */
export function requireCapability(context: Mocha.Context, capability: keyof BackendCapabilities): void {
  const reason = mongoBackend().lacks(capability);
  if (reason) {
    console.log(`      skipped on this backend: ${reason}`);
    context.skip();
  }
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** The rejection of `promise` (fails the test if it resolves). */
export async function rejectionOf(promise: PromiseLike<unknown>): Promise<Error & Record<string, unknown>> {
  try {
    await promise;
  } catch (error) {
    return error as Error & Record<string, unknown>;
  }
  throw new Error('Expected the promise to reject, but it resolved');
}

/** Runs `call`; resolves the error it threw synchronously or rejected with (fails the test if it succeeds). */
export async function failureOf(call: () => unknown): Promise<Error & Record<string, unknown>> {
  let result: unknown;
  try {
    result = call();
  } catch (error) {
    return error as Error & Record<string, unknown>;
  }
  if (result && typeof (result as PromiseLike<unknown>).then === 'function') return rejectionOf(result as PromiseLike<unknown>);
  throw new Error('expected a failure, but the call succeeded');
}

/** The documents of `collections`, sorted by `_id`, as canonical EJSON: compare two to prove nothing was written. */
export async function snapshotOf(...collections: Collection<Document>[]): Promise<string> {
  const contents = await Promise.all(collections.map((collection) => collection.find().sort({ _id: 1 }).toArray()));
  return BSON.EJSON.stringify(contents, { relaxed: false });
}
