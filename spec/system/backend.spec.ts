/**
 * The backend a run uses: named for what answers (never "real mongod" for whatever a URI points
 * at), chosen by MONGLOCK_BACKEND, and announced in one line instead of mongodb-memory-server's
 * retries and stack traces.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { expect } from 'chai';
import { JAVA_SERVER_VERSION, serverKind, startMongoBackend } from '../../support/mongo-backend';
import { mongoBackend, rejectionOf } from '../support/fixture';

const ROOT = resolve(__dirname, '..', '..');

/** Runs `npm run mongo`'s script with `env` and returns every line it printed before `MONGODB_URI=`; then stops it (SIGTERM: it stops its server). */
async function linesBeforeReady(env: Record<string, string | undefined>): Promise<string[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'support/mongo-cli.ts'], { cwd: ROOT, env: { ...process.env, ...env } });
  const lines: string[] = [];
  let before: string[] = [];
  const exited = new Promise((done) => child.once('exit', done));
  try {
    await new Promise<void>((ready, fail) => {
      const read = (line: string): void => {
        if (line.startsWith('MONGODB_URI=')) {
          before = [...lines];
          ready();
        }
        else lines.push(line);
      };
      createInterface({ input: child.stdout }).on('line', read);
      createInterface({ input: child.stderr }).on('line', read);
      child.once('exit', (code) => fail(new Error(`mongo-cli exited with ${code}: ${lines.join('\n')}`)));
      // Settle before mocha's timeout, so that `finally` always stops the process (and its server).
      setTimeout(() => fail(new Error(`mongo-cli printed no URI within 90 s: ${lines.join('\n')}`)), 90_000).unref();
    });
  } finally {
    // SIGTERM: mongo-cli stops its server (the java child) and exits; SIGKILL if it does not.
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
  }
  return before;
}

describe('backend resolution and labels', function () {
  this.timeout(120_000);

  it('names servers by what they report', () => {
    const uri = 'mongodb://127.0.0.1:27017/';
    expect(serverKind(uri, { setName: 'rs0' }, { version: '7.0.24' }, { process: 'mongod' })).to.equal('mongod');
    expect(serverKind(uri, {}, { version: '7.0.77', ferretdbVersion: 'v2.7.0' }, {})).to.equal('ferretdb');
    expect(serverKind(uri, {}, { version: '5.0.0' }, { process: 'java', version: '5.0.0' })).to.equal('mongo-java-server');
    expect(serverKind(uri, { msg: 'isdbgrid' }, { version: '8.0.4' }, { process: 'mongos' })).to.equal('mongos');
    expect(serverKind('mongodb://u:p@docs.cluster-abc.eu-west-1.docdb.amazonaws.com:27017/?tls=true', {}, { version: '5.0.0' }, {})).to.equal('documentdb');
    expect(serverKind('mongodb://u:p@acct.mongo.cosmos.azure.com:10255/?ssl=true', {}, { version: '4.2.0' }, {})).to.equal('cosmosdb');
  });

  it('labels the running backend with what answers', () => {
    const backend = mongoBackend();
    expect(backend.description).not.to.match(/real mongod/);
    if (backend.server === 'mongo-java-server') expect(backend.description).to.match(new RegExp(`^mongo-java-server ${JAVA_SERVER_VERSION.replace(/\./g, '\\.')} \\(reports \\d`));
    if (backend.server === 'mongod') expect(backend.description).to.match(/^mongod \d+\.\d+\.\d+ \((standalone|replica set \S+), /);
    console.log(`      ${backend.description}`);
  });

  it('refuses an unknown MONGLOCK_BACKEND, and uri without MONGODB_URI', async () => {
    const saved = { backend: process.env.MONGLOCK_BACKEND, uri: process.env.MONGODB_URI };
    try {
      process.env.MONGLOCK_BACKEND = 'docker';
      expect((await rejectionOf(startMongoBackend())).message).to.match(/MONGLOCK_BACKEND must be uri, mongod, java or auto/);
      process.env.MONGLOCK_BACKEND = 'uri';
      delete process.env.MONGODB_URI;
      expect((await rejectionOf(startMongoBackend())).message).to.match(/needs MONGODB_URI/);
    } finally {
      for (const [key, value] of [['MONGLOCK_BACKEND', saved.backend], ['MONGODB_URI', saved.uri]] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  it('prints one line per backend decision, without stack traces (the default resolution)', async () => {
    const lines = await linesBeforeReady({ MONGODB_URI: undefined, MONGLOCK_BACKEND: undefined, MONGLOCK_VERBOSE: undefined });
    console.log(`      printed before the URI:\n${lines.map((line) => `        | ${line}`).join('\n')}`);
    expect(lines.length).to.be.within(1, 3);
    expect(lines.some((line) => /^\s+at /.test(line))).to.equal(false);
    expect(lines.at(-1)).to.match(/^backend: /);
  });

  it('MONGLOCK_BACKEND=java goes straight to the fallback', async () => {
    const lines = await linesBeforeReady({ MONGODB_URI: undefined, MONGLOCK_BACKEND: 'java' });
    const decisions = lines.filter((line) => !line.startsWith('resolving mongo-java-server')); // Maven, on a first run only
    expect(decisions).to.have.length(1);
    expect(decisions[0]).to.match(/^backend: mongo-java-server \S+ \(reports \S+, in-memory, the offline fallback\)$/);
  });
});
