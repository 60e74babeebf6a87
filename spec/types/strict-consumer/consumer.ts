/**
 * What a strict user writes against the published package (`exactOptionalPropertyTypes`,
 * `noUncheckedIndexedAccess`, `skipLibCheck: false`): every entry point imported, each lock kind
 * used with its options. Compiled by support/check-package.sh against the packed tarball; never run.
 */
import * as Boom from '@hapi/boom';
import * as Hapi from '@hapi/hapi';
import Bluebird from 'bluebird';
import { MongoClient } from 'mongodb';
import { acquireAll, commit, commitAll, isLockError, multiLock, resourceLocks, semaphore, usingAll, writeLock, type LockHandle } from 'monglock';
import 'monglock/bluebird';
import { lockOf, monglockPlugin } from 'monglock/hapi';
import { instrumentMonglock } from 'monglock/otel';

interface Account {
  _id: string;
  balance: number;
}

export async function strictConsumer(client: MongoClient): Promise<void> {
  const accounts = client.db('shop').collection<Account>('accounts');
  const lock = writeLock({ collection: accounts, locktimeout: 5_000, boom: Boom });
  const balance = await lock.using({ _id: 'a' }, { wait: 2_000, document: { balance: 1 } }, (held) => commit({ $set: { balance: held.document.balance - 1 } }, held.document.balance - 1));
  const handle: LockHandle<Account, undefined, never> = await lock.acquire({ _id: 'a' });
  const permits: number | undefined = handle.permits;
  await handle.extend(1_000);
  await handle.release({ update: { $inc: { balance: permits ?? balance } } });

  const rw = multiLock({ collection: accounts, locktimeouts: { read: 1_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } } });
  const reader = await rw.acquire({ _id: 'a' }, { tag: 'read', wait: 1_000 });
  await (await reader.convert('write', { wait: 1_000 })).release();

  const pool = semaphore({ collection: accounts, limit: 2, Promise: Bluebird });
  await pool.using({ _id: 'a' }, { permits: 1 }, async () => (await pool.inspect({ _id: 'a' })).permits);

  const [first] = await acquireAll([{ lock, filter: { _id: 'a' } }, { lock, filter: { _id: 'b' } }], { wait: 1_000 });
  await first?.release();
  await usingAll([{ lock, filter: { _id: 'a' } }], { document: true }, ([held]) => commitAll([{ $inc: { balance: held.document.balance } }], 'done'));

  const resources = resourceLocks({ collection: client.db('shop').collection('locks') });
  await (await resources.xlock('report', 'job-1', { owner: 'me', ttl: 30_000 })).release();

  const server = Hapi.server();
  await server.register({ plugin: monglockPlugin, options: { boom: Boom } });
  server.route({
    method: 'POST',
    path: '/accounts/{id}',
    options: {
      plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params['id'] }), wait: 1_000 } },
      handler: (request) => lockOf(request).lock.fence,
    },
  });
  instrumentMonglock({}).disable();
  isLockError(new Error('x'), 'LockNotFound');
}
