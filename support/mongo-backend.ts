import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { MongoClient } from 'mongodb';

/**
 * How a run got its MongoDB: `uri` (MONGODB_URI), `mongod` (mongodb-memory-server) or `java`
 * (mongo-java-server, the offline fallback). Chosen by `MONGLOCK_BACKEND` (`uri`, `mongod`,
 * `java`), else in this order: MONGODB_URI, mongodb-memory-server, mongo-java-server.
 */
export type BackendKind = 'uri' | 'mongod' | 'java';

/** What answers at the backend's address, detected from its replies (never assumed from how it was started). */
export type ServerKind = 'mongod' | 'mongos' | 'ferretdb' | 'mongo-java-server' | 'documentdb' | 'cosmosdb';

/** What the backend can do; tests that need more are skipped with the reason printed. */
export interface BackendCapabilities {
  /** Update with an aggregation pipeline. */
  readonly pipelineUpdates: boolean;
  /** TTL indexes that actually expire documents. */
  readonly ttl: boolean;
  /** Sessions and multi-document transactions. */
  readonly transactions: boolean;
  /**
   * Change streams (mongo-java-server's only with its oplog on, as support/java starts it: then with
   * mongod's event shapes, findAndModify writes included, and a `getMore` that waits for an event;
   * what still differs: docs/backends.md).
   */
  readonly changeStreams: boolean;
  /** A replica set, so that `w: 'majority'` waits for replication. */
  readonly replicaSet: boolean;
}

/** A running MongoDB backend. */
export interface MongoBackend {
  readonly kind: BackendKind;
  /** How it was had (`mongodb-memory-server`, `MONGODB_URI`, `in-memory, the offline fallback`). */
  readonly origin: string;
  readonly server: ServerKind;
  readonly uri: string;
  /** For example "mongod 7.0.24, single-node replica set rs0 (mongodb-memory-server)" or "FerretDB 2.7.0 (MONGODB_URI)". */
  readonly description: string;
  readonly version: string;
  readonly capabilities: BackendCapabilities;
  /** Why a capability is missing, for skip messages. */
  readonly lacks: (capability: keyof BackendCapabilities) => string | undefined;
  stop(): Promise<void>;
}

/** The mongo-java-server release support/java/pom.xml resolves. */
export const JAVA_SERVER_VERSION = '1.47.0';

const ROOT = resolve(__dirname, '..');
const JAVA_CACHE = join(ROOT, '.cache', 'mongo-java-server', 'lib');
const JAVA_CLASSES = join(ROOT, '.cache', 'mongo-java-server', 'classes');
const JAVA_SOURCES = join(ROOT, 'support', 'java');
const JAVA_POM = join(JAVA_SOURCES, 'pom.xml');

/**
 * Starts (or connects to) the MongoDB backend. Never resolves a backend silently: `log` is told
 * which one was chosen and why. Rejects with an explanation of what to install or set when none
 * can be had.
 */
export async function startMongoBackend(log: (line: string) => void = () => undefined): Promise<MongoBackend> {
  const chosen = chosenBackend();
  const fromEnv = process.env.MONGODB_URI;
  if (chosen === 'uri' || (chosen === undefined && fromEnv)) {
    if (!fromEnv) throw new Error('MONGLOCK_BACKEND=uri needs MONGODB_URI (mongodb://host:port/...)');
    return describeBackend('uri', fromEnv, async () => undefined, 'MONGODB_URI');
  }
  if (chosen === 'java') return startJavaServer(log);
  try {
    return await startMemoryServer();
  } catch (error) {
    if (chosen === 'mongod' || !isDownloadFailure(error)) throw error;
    log(`no mongod: mongodb-memory-server could not download it (${shortReason(error)}); using the offline fallback mongo-java-server ${JAVA_SERVER_VERSION} (MONGLOCK_BACKEND=java skips the download)`);
  }
  return startJavaServer(log);
}

/** `MONGLOCK_BACKEND`, validated; undefined when unset (or `auto`). */
function chosenBackend(): BackendKind | undefined {
  const value = process.env.MONGLOCK_BACKEND;
  if (value === undefined || value === '' || value === 'auto') return undefined;
  if (value === 'uri' || value === 'mongod' || value === 'java') return value;
  throw new Error(`MONGLOCK_BACKEND must be uri, mongod, java or auto, got ${JSON.stringify(value)}`);
}

/** True when the details of backend decisions are wanted (`MONGLOCK_VERBOSE=1`). */
function verbose(): boolean {
  return process.env.MONGLOCK_VERBOSE === '1' || process.env.MONGLOCK_VERBOSE === 'true';
}

/**
 * A real mongod from mongodb-memory-server (a single-node replica set). Its own warnings (a
 * download failure prints several retries and two stack traces) are kept back unless
 * MONGLOCK_VERBOSE=1, and shown when the failure is not a download failure.
 */
async function startMemoryServer(): Promise<MongoBackend> {
  const held: unknown[][] = [];
  const { warn, error } = console;
  if (!verbose()) {
    console.warn = (...args: unknown[]) => void held.push(args);
    console.error = (...args: unknown[]) => void held.push(args);
  }
  try {
    const { MongoMemoryReplSet } = await import('mongodb-memory-server');
    const replSet = await MongoMemoryReplSet.create({ replSet: { count: 1, storageEngine: 'wiredTiger' } });
    return await describeBackend('mongod', replSet.getUri(), () => replSet.stop().then(() => undefined), 'mongodb-memory-server');
  } catch (failure) {
    if (!isDownloadFailure(failure)) for (const args of held) warn(...args);
    throw failure;
  } finally {
    console.warn = warn;
    console.error = error;
  }
}

function isDownloadFailure(error: unknown): boolean {
  const text = `${(error as Error)?.name} ${(error as { code?: string })?.code} ${(error as Error)?.message}`;
  return /DownloadError|Download failed|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|getaddrinfo|certificate/i.test(text);
}

/** The first two lines of an error's message, on one line (mongodb-memory-server puts the cause on the second). */
function shortReason(error: unknown): string {
  const lines = String((error as Error)?.message ?? error).split('\n').map((line) => line.trim()).filter(Boolean);
  return lines.slice(0, 2).join(' ') || 'unknown';
}

async function startJavaServer(log: (line: string) => void): Promise<MongoBackend> {
  const java = spawnSync('java', ['-version']);
  if (java.error || java.status !== 0) {
    throw new Error(
      'No MongoDB backend: mongod could not be downloaded and Java 17+ is not installed for the offline fallback. ' +
        'Set MONGODB_URI to a running mongod 4.4+, set MONGOMS_SYSTEM_BINARY to an installed mongod, or install Java 17 and Maven.',
    );
  }
  ensureJavaServerJars(log);
  const classes = ensureLauncherClasses(log);
  const child = spawn('java', ['-cp', [join(JAVA_CACHE, '*'), classes].join(delimiter), 'Launcher', '0'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const port = await waitForReady(child);
  const uri = `mongodb://127.0.0.1:${port}/?directConnection=true`;
  const stop = (): Promise<void> =>
    new Promise((done) => {
      if (child.exitCode !== null) return done();
      child.once('exit', () => done());
      child.stdin?.end();
      setTimeout(() => child.kill('SIGKILL'), 3_000).unref();
    });
  try {
    return await describeBackend('java', uri, stop, 'in-memory, the offline fallback');
  } catch (error) {
    await stop();
    throw error;
  }
}

function ensureJavaServerJars(log: (line: string) => void): void {
  const present = existsSync(JAVA_CACHE) && readdirSync(JAVA_CACHE).some((name) => name.startsWith('mongo-java-server-core'));
  if (present) return;
  log(`resolving mongo-java-server ${JAVA_SERVER_VERSION} with Maven (first run only)`);
  mkdirSync(JAVA_CACHE, { recursive: true });
  const mvn = spawnSync('mvn', ['-q', '-B', '-f', JAVA_POM, 'dependency:copy-dependencies', `-DoutputDirectory=${JAVA_CACHE}`], {
    encoding: 'utf8',
  });
  if (mvn.error || mvn.status !== 0) {
    throw new Error(
      `No MongoDB backend: Maven could not fetch mongo-java-server (${mvn.error?.message ?? (mvn.stderr || mvn.stdout)}). ` +
        'Install Maven with access to Maven Central, or set MONGODB_URI to a running mongod 4.4+.',
    );
  }
}

/**
 * The launcher's classes (support/java/*.java), compiled once per version of their sources into
 * .cache/mongo-java-server/classes/<hash> (a launch then compiles nothing). Returns that folder.
 */
function ensureLauncherClasses(log: (line: string) => void): string {
  const sources = readdirSync(JAVA_SOURCES).filter((name) => name.endsWith('.java')).sort();
  const hash = createHash('sha256');
  for (const name of sources) hash.update(name).update('\0').update(readFileSync(join(JAVA_SOURCES, name))).update('\0');
  const folder = join(JAVA_CLASSES, hash.digest('hex').slice(0, 16));
  if (existsSync(folder)) return folder;
  log("resolving mongo-java-server's launcher: compiling support/java/*.java (once per change of them)");
  const building = `${folder}.${process.pid}`;
  mkdirSync(building, { recursive: true });
  const javac = spawnSync('javac', ['-cp', join(JAVA_CACHE, '*'), '-d', building, ...sources.map((name) => join(JAVA_SOURCES, name))], { encoding: 'utf8' });
  if (javac.error || javac.status !== 0) {
    rmSync(building, { recursive: true, force: true });
    throw new Error(`No MongoDB backend: the mongo-java-server launcher did not compile (${javac.error?.message ?? javac.stderr})`);
  }
  try {
    renameSync(building, folder);
  } catch (error) {
    rmSync(building, { recursive: true, force: true }); // another process compiled the same sources first
    if (!existsSync(folder)) throw error;
  }
  return folder;
}

function waitForReady(child: ChildProcess): Promise<number> {
  return new Promise((resolvePort, reject) => {
    let output = '';
    const timer = setTimeout(() => fail(new Error(`mongo-java-server did not start within 60 s: ${output}`)), 60_000);
    const fail = (error: Error): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const ready = /READY (\d+)/.exec(output);
      if (ready) {
        clearTimeout(timer);
        resolvePort(Number(ready[1]));
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', fail);
    child.once('exit', (code) => fail(new Error(`mongo-java-server exited with ${code}: ${output}`)));
  });
}

/**
 * A backend another process started (`kind`, `uri` and `origin` as that process's backend has them):
 * the same description and capabilities, and `stop()` leaves it running.
 */
export function attachMongoBackend(kind: BackendKind, uri: string, origin: string): Promise<MongoBackend> {
  return describeBackend(kind, uri, async () => undefined, origin);
}

/** What answers at `uri`, detected from its replies (and from the host names of hosted services). */
async function describeBackend(kind: BackendKind, uri: string, stop: () => Promise<void>, origin: string): Promise<MongoBackend> {
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10_000 });
  try {
    const admin = client.db('admin');
    const hello = await admin.command({ isMaster: 1 });
    const build = await admin.command({ buildInfo: 1 }).catch(() => ({}) as Record<string, unknown>);
    const status = await admin.command({ serverStatus: 1 }).catch(() => ({}) as Record<string, unknown>);
    const server = serverKind(uri, hello, build, status);
    const reported = String(build.version ?? status.version ?? '?');
    const version = server === 'mongo-java-server' ? JAVA_SERVER_VERSION : server === 'ferretdb' ? String(build.ferretdbVersion ?? reported) : reported;
    const replicaSet = typeof hello.setName === 'string';
    const java = server === 'mongo-java-server';
    const mongodLike = server === 'mongod' || server === 'mongos';
    // mongo-java-server has change streams only with its oplog on (local.oplog.rs; MONGLOCK_JAVA_OPLOG=off starts it without)
    const javaOplog = java && (await client.db('local').listCollections({}, { nameOnly: true }).toArray()).some((c) => c.name === 'oplog.rs');
    const capabilities: BackendCapabilities = {
      pipelineUpdates: !java,
      ttl: !java,
      transactions: mongodLike && (replicaSet || server === 'mongos'),
      changeStreams: javaOplog || (mongodLike && (replicaSet || server === 'mongos')),
      replicaSet,
    };
    const reasons: Record<keyof BackendCapabilities, string> = {
      pipelineUpdates: 'mongo-java-server has no update pipelines',
      ttl: 'mongo-java-server never expires TTL indexes',
      transactions: mongodLike ? 'needs a replica set' : `${SERVER_NAMES[server]} is not a mongod replica set: no transactions are assumed`,
      changeStreams: mongodLike ? 'needs a replica set' : java ? 'mongo-java-server was started without its oplog (MONGLOCK_JAVA_OPLOG=off): its change streams deliver nothing' : `${SERVER_NAMES[server]} is not a mongod replica set: no change streams are assumed`,
      replicaSet: `this ${SERVER_NAMES[server]} is not a replica set`,
    };
    const topology = server === 'mongos' ? 'sharded cluster (mongos)' : replicaSet ? `replica set ${String(hello.setName)}` : 'standalone';
    const detail = java ? `reports ${reported}, ${origin}` : mongodLike ? `${topology}, ${origin}` : origin;
    return {
      kind,
      origin,
      server,
      uri,
      version,
      description: `${SERVER_NAMES[server]} ${version} (${detail})`,
      capabilities,
      lacks: (capability) => (capabilities[capability] ? undefined : reasons[capability]),
      stop,
    };
  } finally {
    await client.close();
  }
}

const SERVER_NAMES: Record<ServerKind, string> = {
  mongod: 'mongod',
  mongos: 'mongos',
  ferretdb: 'FerretDB',
  'mongo-java-server': 'mongo-java-server',
  documentdb: 'Amazon DocumentDB',
  cosmosdb: 'Azure Cosmos DB',
};

/** Names the server from what it says of itself: FerretDB's `buildInfo.ferretdbVersion`, mongo-java-server's `process: 'java'`, mongos' `msg: 'isdbgrid'`, hosted services' host names. */
export function serverKind(uri: string, hello: Record<string, unknown>, build: Record<string, unknown>, status: Record<string, unknown>): ServerKind {
  if (build.ferretdbVersion !== undefined || (build.ferretdb !== undefined && build.ferretdb !== null)) return 'ferretdb';
  if (status.process === 'java') return 'mongo-java-server';
  if (/\.docdb(-elastic)?\.amazonaws\.com/i.test(uri)) return 'documentdb';
  if (/\.cosmos\.azure\.com|\.mongo\.cosmos\.azure\.com|\.documents\.azure\.com/i.test(uri)) return 'cosmosdb';
  if (hello.msg === 'isdbgrid') return 'mongos';
  return 'mongod';
}
