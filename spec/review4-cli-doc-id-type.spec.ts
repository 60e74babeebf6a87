/**
 * Review 4: `monglock release --doc <_id> --tag <tag>` picks the rows to release by comparing
 * the *printed* form of `_id` (cli.ts: `show(row.target) === show(parseId(doc))`), and `show`
 * prints a string `_id` bare and a number as relaxed EJSON. So `--doc 42` (the number, as the
 * help says: "JSON/EJSON, else a string") also matches the document whose `_id` is the string
 * "42", and force-releases the lock its holder still uses: another client takes it, and two
 * clients hold the lock of document "42". (`--doc '"42"'` matches the number 42 the same way.)
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { expect } from 'chai';
import { isLockError, writeLock } from '../lib';
import { freshCollection, mongoBackend, rejectionOf } from './support/fixture';

const ROOT = resolve(__dirname, '..');

function run(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', ...args], { cwd: ROOT, env: { ...process.env, MONGODB_URI: undefined } });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdin.end('');
    child.once('exit', (code) => done({ code, out, err }));
  });
}

describe('review 4: CLI release --doc matches _id by its printed form', function () {
  this.timeout(60_000);

  it('release --doc 42 leaves the lock of the document whose _id is the string "42" alone', async () => {
    const collection = await freshCollection([{ _id: 42 }, { _id: '42' }]);
    const where = ['--uri', mongoBackend().uri, '--db', collection.dbName, '--collection', collection.collectionName];
    const lock = writeLock({ collection, locktimeout: 30_000 });
    const numeric = await lock.acquire({ _id: 42 });
    const textual = await lock.acquire({ _id: '42' }); // a client working on document "42"

    const released = await run(['release', ...where, '--doc', '42', '--tag', 'write', '--yes']);
    console.log(released.out.replace(/^/gm, '      | '));
    expect(released.code, released.err).to.equal(0);
    const numericGone = await rejectionOf(numeric.release()); // the lock meant was released
    expect(isLockError(numericGone, 'LockNotFound') || isLockError(numericGone, 'LockWasReacquired'), String(numericGone)).to.equal(true);

    // Document "42" must still be locked by its holder; nobody else may take it.
    const intruder = await lock.acquire({ _id: '42' }).catch((error: unknown) => error);
    const secondHolder = !isLockError(intruder, 'LockAlreadyTaken');
    if (secondHolder) await (intruder as { release(): Promise<void> }).release();
    else await textual.release();
    expect(secondHolder, 'another client acquired document "42" while its holder still held it').to.equal(false);
  });
});
