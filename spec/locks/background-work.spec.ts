/**
 * What monglock goes on doing after a call settled (releasing a lock whose reply was lost, until
 * its write can no longer land) never keeps a process alive: a process whose own work is done
 * exits, and a lock left behind ends with its lease.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { freshCollection, mongoBackend } from '../support/fixture';

describe('background work', () => {
  it('the release of a lost acquisition, pausing until its write can no longer land, holds no timer that keeps the process alive', async function () {
    this.timeout(30_000);
    const collection = await freshCollection([{ _id: 'a' }]);
    const settings = { uri: mongoBackend().uri, db: collection.dbName, collection: collection.collectionName };
    const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'support', 'lost-acquisition-process.ts'), JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const printed = new Promise<void>((resolve) => child.stdout.on('data', () => out.includes('\n') && resolve()));
    try {
      await Promise.race([printed, exited]);
      expect(JSON.parse(out.trim().split('\n')[0] ?? 'null'), 'timers left once its client closed').to.deep.equal({ timers: 0 });
      expect(await exited, 'exit code').to.equal(0);
    } finally {
      child.kill();
    }
  });
});
