import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { MongoClient } from 'mongodb';

/** Which MongoDB a run uses; resolved once, in this order: `MONGODB_URI`, mongodb-memory-server, mongo-java-server. */
export type BackendKind = 'uri' | 'mongod' | 'java';

/** What the backend can do; tests that need more are skipped with the reason printed. */
export interface BackendCapabilities {
  /** Update with an aggregation pipeline. */
  readonly pipelineUpdates: boolean;
  /** TTL indexes that actually expire documents. */
  readonly ttl: boolean;
  /** Sessions and multi-document transactions. */
  readonly transactions: boolean;
  /** Change streams that see every write. */
  readonly changeStreams: boolean;
  /** A replica set, so that `w: 'majority'` waits for replication. */
  readonly replicaSet: boolean;
}

/** A running MongoDB backend. */
export interface MongoBackend {
  readonly kind: BackendKind;
  readonly uri: string;
  /** For example "real mongod 7.0.24 (mongodb-memory-server, single-node replica set)". */
  readonly description: string;
  readonly version: string;
  readonly capabilities: BackendCapabilities;
  /** Why a capability is missing, for skip messages. */
  readonly lacks: (capability: keyof BackendCapabilities) => string | undefined;
  stop(): Promise<void>;
}

const ROOT = resolve(__dirname, '..');
const JAVA_CACHE = join(ROOT, '.cache', 'mongo-java-server', 'lib');
const JAVA_POM = join(ROOT, 'support', 'java', 'pom.xml');
const JAVA_LAUNCHER = join(ROOT, 'support', 'java', 'Launcher.java');

/**
 * Starts (or connects to) the MongoDB backend. Never resolves a backend silently: `log` is told
 * which one was chosen and why. Rejects with an explanation of what to install or set when none
 * can be had.
 */
export async function startMongoBackend(log: (line: string) => void = () => undefined): Promise<MongoBackend> {
  const fromEnv = process.env.MONGODB_URI;
  if (fromEnv) return describeBackend('uri', fromEnv, async () => undefined, 'MONGODB_URI');

  try {
    const { MongoMemoryReplSet } = await import('mongodb-memory-server');
    const replSet = await MongoMemoryReplSet.create({ replSet: { count: 1, storageEngine: 'wiredTiger' } });
    return describeBackend('mongod', replSet.getUri(), () => replSet.stop().then(() => undefined), 'mongodb-memory-server, single-node replica set');
  } catch (error) {
    if (!isDownloadFailure(error)) throw error;
    log(`mongodb-memory-server could not download mongod (${shortReason(error)}); using the offline fallback mongo-java-server`);
  }
  return startJavaServer(log);
}

function isDownloadFailure(error: unknown): boolean {
  const text = `${(error as Error)?.name} ${(error as { code?: string })?.code} ${(error as Error)?.message}`;
  return /DownloadError|Download failed|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|getaddrinfo|certificate/i.test(text);
}

function shortReason(error: unknown): string {
  return String((error as Error)?.message ?? error).split('\n').find((line) => line.trim()) ?? 'unknown';
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
  const child = spawn('java', ['-cp', join(JAVA_CACHE, '*'), JAVA_LAUNCHER, '0'], { stdio: ['pipe', 'pipe', 'pipe'] });
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
    return await describeBackend('java', uri, stop, 'in-memory, offline fallback');
  } catch (error) {
    await stop();
    throw error;
  }
}

function ensureJavaServerJars(log: (line: string) => void): void {
  const present = existsSync(JAVA_CACHE) && readdirSync(JAVA_CACHE).some((name) => name.startsWith('mongo-java-server-core'));
  if (present) return;
  log('resolving mongo-java-server 1.47.0 with Maven (first run only)');
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

async function describeBackend(kind: BackendKind, uri: string, stop: () => Promise<void>, origin: string): Promise<MongoBackend> {
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10_000 });
  try {
    const admin = client.db('admin');
    const status = await admin.command({ serverStatus: 1 }).catch(() => ({}) as Record<string, unknown>);
    const hello = await admin.command({ isMaster: 1 });
    const java = status.process === 'java';
    const version = java ? `1.47.0 (reports ${String(status.version ?? '?')})` : String((await admin.command({ buildInfo: 1 })).version);
    const replicaSet = typeof hello.setName === 'string';
    const resolvedKind: BackendKind = java ? 'java' : kind;
    const capabilities: BackendCapabilities = {
      pipelineUpdates: !java,
      ttl: !java,
      transactions: !java && replicaSet,
      changeStreams: !java && replicaSet,
      replicaSet,
    };
    const name = java ? 'mongo-java-server' : 'real mongod';
    const reasons: Record<keyof BackendCapabilities, string> = {
      pipelineUpdates: 'mongo-java-server has no update pipelines',
      ttl: 'mongo-java-server never expires TTL indexes',
      transactions: java ? 'mongo-java-server has no sessions or transactions' : 'needs a replica set',
      changeStreams: java ? 'mongo-java-server change streams miss findAndModify writes' : 'needs a replica set',
      replicaSet: java ? 'mongo-java-server is not a replica set' : 'this server is not a replica set',
    };
    return {
      kind: resolvedKind,
      uri,
      version,
      description: `${name} ${version} (${origin})`,
      capabilities,
      lacks: (capability) => (capabilities[capability] ? undefined : reasons[capability]),
      stop,
    };
  } finally {
    await client.close();
  }
}
