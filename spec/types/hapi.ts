/**
 * Type tests of `monglock/hapi`'s augmentation of `@hapi/hapi`: a route's `plugins.monglock` is
 * checked, and `request.plugins.monglock` is typed. Checked by `tsc`, never run.
 */
import * as Boom from '@hapi/boom';
import * as Hapi from '@hapi/hapi';
import { expectTypeOf } from 'expect-type';
import type { Db, Document } from 'mongodb';
import { commit, multiLock, writeLock, type LockHandle } from 'monglock';
import { lockOf, monglockPlugin, type RequestLock } from 'monglock/hapi';

interface Order {
  _id: string;
  balance: number;
}

export async function routes(db: Db): Promise<void> {
  const server = Hapi.server();
  await server.register({ plugin: monglockPlugin, options: { boom: Boom } });
  // @ts-expect-error: unknown plugin option
  await server.register({ plugin: monglockPlugin, options: { bom: Boom } });

  const orders = writeLock({ collection: db.collection<Order>('orders') });
  const tagged = multiLock({ collection: db.collection('orders'), locktimeouts: { read: 1_000, write: 5_000 } });

  // The plugin's own TSDoc example compiles.
  server.route({
    method: 'POST',
    path: '/orders/{id}/pay',
    options: {
      plugins: { monglock: { lock: orders, filter: (request) => ({ _id: request.params.id }), wait: 2000 } },
      handler: (request) => {
        expectTypeOf(request.plugins.monglock).toEqualTypeOf<RequestLock>();
        expectTypeOf(request.plugins.monglock.lock).toEqualTypeOf<LockHandle<Document, undefined, Document | undefined>>();
        expectTypeOf(lockOf(request).signal).toEqualTypeOf<AbortSignal>();
        return request.plugins.monglock.lock.fence;
      },
    },
  });

  server.route({
    method: 'POST',
    path: '/orders/{id}/debit',
    options: {
      plugins: { monglock: { lock: tagged, tag: 'write', filter: (request) => ({ _id: request.params.id }), mode: 'checkout', document: { balance: 1 }, locktimeout: 3_000 } },
      handler: (request) => commit({ $inc: { balance: -1 } }, request.plugins.monglock.document),
    },
  });

  server.route({
    method: 'POST',
    path: '/typo',
    options: {
      // @ts-expect-error: `wiat` is not an option (a typo of `wait`)
      plugins: { monglock: { lock: orders, filter: () => ({ _id: 'a' }), wiat: 2000 } },
      handler: () => 'ok',
    },
  });

  server.route({
    method: 'POST',
    path: '/mode',
    options: {
      // @ts-expect-error: `mode` is 'hold' or 'checkout'
      plugins: { monglock: { lock: orders, filter: () => ({ _id: 'a' }), mode: 'chekout' } },
      handler: () => 'ok',
    },
  });

  server.route({
    method: 'POST',
    path: '/no-filter',
    options: {
      // @ts-expect-error: `filter` (or `filters`) is required
      plugins: { monglock: { lock: orders } },
      handler: () => 'ok',
    },
  });
}
