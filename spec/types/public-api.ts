/**
 * Type tests of the public API, checked by `tsc` (`npm run typecheck`, with driver 6 and driver 7
 * types): each `@ts-expect-error` line must fail to compile, every other line must compile.
 * Never run.
 */
import { expectTypeOf } from 'expect-type';
import type { Collection, Db, Document } from 'mongodb';
import { isLockError, multiLock, resourceLocks, writeLock, type LockError, type LockHandle, type MultiLock, type WriteLock } from 'monglock';

interface Order {
  _id: string;
  total: number;
  status: 'open' | 'paid';
}

export async function typedCollections(db: Db): Promise<void> {
  const orders: Collection<Order> = db.collection<Order>('orders');

  // A typed collection is accepted (driver 6 and 7), and the filters are typed by its schema.
  const lock = writeLock({ collection: orders, locktimeout: 5_000 });
  expectTypeOf(lock).toEqualTypeOf<WriteLock<Order>>();
  const handle = await lock.acquire({ _id: 'o-1' }, { wait: 1_000 });
  expectTypeOf(handle).toEqualTypeOf<LockHandle>();
  await lock.acquire({ _id: 'o-1', status: 'open', total: { $gt: 10 } });
  // @ts-expect-error: `_id` of an Order is a string
  await lock.acquire({ _id: 42 });
  // @ts-expect-error: `status` is 'open' | 'paid'
  await lock.acquire({ _id: 'o-1', status: 'shipped' });
  await lock.release({ _id: 'o-1' }, { lock: handle, update: { $set: { status: 'paid' } } });
  await lock.using({ _id: 'o-1' }, { document: true }, async (held, signal) => {
    expectTypeOf(held).toEqualTypeOf<LockHandle>();
    expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
    return held.fence;
  });

  const tagged = multiLock({ collection: orders, locktimeouts: { read: 1_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] } } });
  expectTypeOf(tagged).toEqualTypeOf<MultiLock<Order>>();
  await tagged.acquire({ _id: 'o-1' }, { tag: 'read' });
  // @ts-expect-error: a multiLock acquisition needs its params (a tag or a lock)
  await tagged.acquire({ _id: 'o-1' });

  resourceLocks({ collection: db.collection<{ _id: string }>('locks') });
}

export async function untypedCollections(db: Db): Promise<void> {
  // An untyped collection takes any filter (the driver alone would type `_id` as an ObjectId).
  const lock = writeLock({ collection: db.collection('orders') });
  expectTypeOf(lock).toEqualTypeOf<WriteLock<Document>>();
  await lock.acquire({ _id: 'o-1', 'nested.path': 3 });
  // @ts-expect-error: the collection is required
  writeLock({ locktimeout: 5_000 });
  // @ts-expect-error: `locktimeout` is a number of ms
  writeLock({ collection: db.collection('orders'), locktimeout: '5s' });
  // @ts-expect-error: `w` is 'majority' or a number of members
  writeLock({ collection: db.collection('orders'), w: 'all' });
}

export function errors(error: unknown): void {
  if (isLockError(error)) {
    // A LockError, or the boom error a caller-supplied boom made of it.
    expectTypeOf(error).toMatchTypeOf<Error>();
    expectTypeOf(error.type).toEqualTypeOf<'notFound' | 'conflict' | 'badImplementation'>();
    // @ts-expect-error: subtypes are monglock v2's, spelling included
    if (error.subtype === 'ResourceNotFound') return;
    if (error.subtype === 'RessourceNotFound') return;
  }
  if (error instanceof Error && (error as LockError).name === 'LockError') expectTypeOf((error as LockError).statusCode).toEqualTypeOf<number>();
}
