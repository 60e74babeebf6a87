/**
 * Mocha fixtures. The global setup resolves the MongoDB backend once per run (MONGLOCK_BACKEND,
 * else MONGODB_URI, else a real mongod from mongodb-memory-server, else the offline fallback),
 * prints which one answers and which driver talks to it, and stops it at the end. The root hooks
 * (once per spec file when mocha runs files in parallel worker processes) attach to it, give each
 * test fresh collections and drop them afterwards.
 */
import { randomBytes } from 'node:crypto';
import { BSON, MongoClient, type Collection, type CommandStartedEvent, type Db, type Document } from 'mongodb';
import { multiLock, resourceLocks, writeLock, type LockHandle, type MultiLock, type ResourceLockHandle, type ResourceLocks, type WriteLock } from '../../lib';
import { isChangeStreamCommand } from '../../support/command-kinds';
import { attachMongoBackend, startMongoBackend, type BackendCapabilities, type BackendKind, type MongoBackend } from '../../support/mongo-backend';

/** How worker processes find the backend the global setup started. */
const BACKEND_ENV = 'MONGLOCK_SPEC_BACKEND';

let started: MongoBackend | undefined;
let backend: MongoBackend | undefined;
let client: MongoClient | undefined;
let created: string[] = [];
const commandsStarted: CommandStartedEvent[] = [];
const extraClients: MongoClient[] = [];

export const DB_NAME = 'monglock_spec';

/** Starts the backend once per run; worker processes inherit where it is. */
export async function mochaGlobalSetup(): Promise<void> {
  started = await startMongoBackend((line) => console.log(`  [backend] ${line}`));
  console.log(`  [backend] tests run on ${started.description} with the Node.js driver ${driverVersion()}`);
  process.env[BACKEND_ENV] = JSON.stringify({ kind: started.kind, uri: started.uri, origin: started.origin });
}

/** Drops the test database and stops the backend. */
export async function mochaGlobalTeardown(): Promise<void> {
  if (!started) return;
  const admin = new MongoClient(started.uri);
  try {
    await admin.db(DB_NAME).dropDatabase();
  } catch {
    // The backend may be gone already.
  } finally {
    await admin.close().catch(() => undefined);
    await started.stop();
  }
}

export const mochaHooks = {
  async beforeAll(this: Mocha.Context): Promise<void> {
    this.timeout(240_000);
    const where = JSON.parse(process.env[BACKEND_ENV] ?? 'null') as { kind: BackendKind; uri: string; origin: string } | null;
    if (!where) throw new Error('The MongoDB backend is not started (is spec/support/fixture.ts required, so that its global setup runs?)');
    backend = started ?? (await attachMongoBackend(where.kind, where.uri, where.origin));
    client = new MongoClient(backend.uri, { monitorCommands: true });
    client.on('commandStarted', (event) => commandsStarted.push(event));
    await client.connect();
  },
  async afterEach(): Promise<void> {
    const db = client?.db(DB_NAME);
    await Promise.all(created.map((name) => db?.collection(name).drop().catch(() => undefined)));
    created = [];
  },
  async afterAll(this: Mocha.Context): Promise<void> {
    this.timeout(30_000);
    await Promise.all(extraClients.splice(0).map((extra) => extra.close().catch(() => undefined)));
    await client?.close();
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


/**
 * Runs `body` and returns the commands the shared client sent meanwhile for lock calls (names, for
 * example `findAndModify`): not the driver's own, nor those of change streams ({@link isChangeStreamCommand}).
 */
export async function commandsSentBy<T>(body: () => Promise<T>): Promise<{ result: T | undefined; error: unknown; commands: string[] }> {
  const from = commandsStarted.length;
  let result: T | undefined;
  let error: unknown;
  try {
    result = await body();
  } catch (caught) {
    error = caught;
  }
  const commands = commandsStarted
    .slice(from)
    .filter((event) => !isChangeStreamCommand(event))
    .map((event) => event.commandName)
    .filter((name) => !['isMaster', 'hello', 'ismaster', 'endSessions'].includes(name));
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

/**
 * Every kind of lock with something held, for tests that call every public function with bad
 * input: a writeLock and a read/write multiLock on `docs` (documents 1 and 2, each locked), a
 * resource lock in `lockColl`, and `snapshot()` of both collections to compare with `before`.
 */
export async function locksHoldingSomething(): Promise<{
  docs: Collection<Document>;
  lockColl: Collection<Document>;
  wl: WriteLock;
  ml: MultiLock;
  rl: ResourceLocks;
  held: LockHandle;
  heldRead: LockHandle;
  resource: ResourceLockHandle;
  snapshot: () => Promise<string>;
  before: string;
}> {
  const docs = await freshCollection([{ _id: 1, v: 'a' }, { _id: 2, v: 'b' }]);
  const lockColl = await freshCollection();
  const wl = writeLock({ collection: docs });
  const ml = multiLock({ collection: docs, locktimeouts: { read: 1000, write: 1000 }, lockRelationships: { read: { cooperative: ['write'] } } });
  const rl = resourceLocks({ collection: lockColl });
  const held: LockHandle = await wl.acquire({ _id: 1 });
  const heldRead = await ml.acquire({ _id: 2 }, { tag: 'read' });
  const resource = await rl.xlock('res', 'group');
  const snapshot = (): Promise<string> => snapshotOf(docs, lockColl);
  return { docs, lockColl, wl, ml, rl, held, heldRead, resource, snapshot, before: await snapshot() };
}
