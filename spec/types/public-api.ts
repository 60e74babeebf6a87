/**
 * Type tests of the public API, checked by `tsc` (`npm run typecheck`, with driver 6 and driver 7
 * types): each `@ts-expect-error` line must fail to compile, every other line must compile.
 * Never run.
 */
import Bluebird from 'bluebird';
import { expectTypeOf } from 'expect-type';
import type { Collection, Db, Document, WithId } from 'mongodb';
import { commit, commitAll, isLockError, quarantine, LockHandle, multiLock, resourceLocks, semaphore, usingAll, withOwner, writeLock, type LockError, type LockInspection, type MultiLock, type MultiLockOptions, type ResourceLockHandle, type Semaphore, type WriteLock } from 'monglock';
import 'monglock/bluebird';

/** The params a multiLock's `acquire` takes (its `tag` typed by the lock's declared tags). */
type MultiLockAcquireParamsOf<L> = L extends { acquire(filter: never, params: infer A): unknown } ? A : never;

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
  expectTypeOf(handle).toEqualTypeOf<LockHandle<Order, undefined, never>>();
  expectTypeOf(handle.document).toEqualTypeOf<undefined>();
  expectTypeOf(lock.inspect({ status: 'open' })).toEqualTypeOf<Promise<LockInspection>>();
  await lock.acquire({ _id: 'o-1', status: 'open', total: { $gt: 10 } });
  // @ts-expect-error: `_id` of an Order is a string
  await lock.acquire({ _id: 42 });
  // @ts-expect-error: `status` is 'open' | 'paid'
  await lock.acquire({ _id: 'o-1', status: 'shipped' });
  await lock.release({ _id: 'o-1' }, { lock: handle, update: { $set: { status: 'paid' } } });
  // @ts-expect-error: an update is typed by the collection's schema
  await lock.release({ _id: 'o-1' }, { lock: handle, update: { $set: { status: 'shipped' } } });
  // @ts-expect-error: so is a handle's
  await handle.release({ update: { $inc: { status: 1 } } });
  const fence: number = await lock.using({ _id: 'o-1' }, { document: true }, async (held, signal) => {
    expectTypeOf(held).toEqualTypeOf<LockHandle<Order, undefined, WithId<Order>>>();
    // Asked for, the document is there: no `!`.
    expectTypeOf(held.document).toEqualTypeOf<WithId<Order>>();
    expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
    return held.fence;
  });
  expectTypeOf(fence).toEqualTypeOf<number>();

  // The document an acquisition returns is typed by its projection.
  const whole = await lock.acquire({ _id: 'o-1' }, { document: true });
  expectTypeOf(whole.document).toEqualTypeOf<WithId<Order>>();
  const picked = await lock.acquire({ _id: 'o-1' }, { document: { total: 1 } });
  expectTypeOf(picked.document).toEqualTypeOf<Pick<WithId<Order>, '_id' | 'total'>>();
  const withoutId = await lock.acquire({ _id: 'o-1' }, { document: { total: 1, _id: 0 } });
  expectTypeOf(withoutId.document).toEqualTypeOf<Pick<WithId<Order>, 'total'>>();
  const omitted = await lock.acquire({ _id: 'o-1' }, { document: { status: 0 } });
  expectTypeOf(omitted.document).toEqualTypeOf<Omit<WithId<Order>, 'status'>>();
  // An untyped collection's document, asked for, is a document; not asked for, undefined.
  const untyped = writeLock({ collection: db.collection('orders') });
  expectTypeOf((await untyped.acquire({ _id: 'o-1' }, { document: true })).document).toEqualTypeOf<Document>();
  expectTypeOf((await untyped.acquire({ _id: 'o-1' })).document).toEqualTypeOf<undefined>();
  // @ts-expect-error: without `document`, there is no document to read
  void handle.document.total;

  // A commit returned from a typed body is checked against the schema; its value is what using() resolves.
  const total = await lock.using({ _id: 'o-1' }, { document: { total: 1 } }, (held) => commit({ $set: { total: held.document.total + 1 } }, held.document.total + 1));
  expectTypeOf(total).toEqualTypeOf<number>();
  // @ts-expect-error: `total` is a number
  await lock.using({ _id: 'o-1' }, {}, () => commit({ $set: { total: 'many' } }, 1));

  // A quarantine: its update is typed by the schema too, and using() resolves its value.
  expectTypeOf(handle.quarantine({ reason: 'bad', until: new Date(), update: { $set: { status: 'paid' } } })).toEqualTypeOf<Promise<void>>();
  // @ts-expect-error: `status` is 'open' | 'paid'
  await handle.quarantine({ reason: 'bad', update: { $set: { status: 'shipped' } } });
  const marked = await lock.using({ _id: 'o-1' }, {}, () => quarantine('bad', { value: 7, update: { $set: { status: 'paid' } } }));
  expectTypeOf(marked).toEqualTypeOf<number>();
  expectTypeOf(lock.clearQuarantine({ _id: 'o-1' })).toEqualTypeOf<Promise<boolean>>();

  const tagged = multiLock({ collection: orders, locktimeouts: { read: 1_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] } } });
  expectTypeOf(tagged).toEqualTypeOf<MultiLock<Order>>();
  await tagged.acquire({ _id: 'o-1' }, { tag: 'read' });
  // @ts-expect-error: a multiLock acquisition needs its params (a tag or a lock)
  await tagged.acquire({ _id: 'o-1' });

  // A call's tag is one the options declare (the keys of locktimeouts, else of lockRelationships).
  expectTypeOf<NonNullable<MultiLockAcquireParamsOf<typeof tagged>['tag']>>().toEqualTypeOf<'read' | 'write'>();
  // @ts-expect-error: `wirte` is not a declared tag
  await tagged.acquire({ _id: 'o-1' }, { tag: 'wirte' });
  // @ts-expect-error: nor in using()
  await tagged.using({ _id: 'o-1' }, { tag: 'wirte' }, () => 1);
  await tagged.forceRelease({ _id: 'o-1' }, { tag: 'read' });
  // @ts-expect-error: nor in forceRelease()
  await tagged.forceRelease({ _id: 'o-1' }, { tag: 'wirte' });
  // @ts-expect-error: a forced release of a multiLock names its tag
  await tagged.forceRelease({ _id: 'o-1' });
  const byRelationships = multiLock({ collection: orders, locktimeout: 1_000, lockRelationships: { run: {}, audit: { cooperative: ['run'] } } });
  expectTypeOf<NonNullable<MultiLockAcquireParamsOf<typeof byRelationships>['tag']>>().toEqualTypeOf<'run' | 'audit'>();
  await byRelationships.acquire({ _id: 'o-1' }, { tag: 'audit' });
  // @ts-expect-error: a relationship key outside locktimeouts' keys (a misspelled tag) leaves locktimeouts without it
  multiLock({ collection: orders, locktimeouts: { read: 1_000, write: 5_000 }, lockRelationships: { wirte: { cooperative: ['read'] } } });
  // @ts-expect-error: so does a limit of an undeclared tag
  multiLock({ collection: orders, locktimeouts: { read: 1_000 }, limits: { raed: 3 } });
  // Options built apart, typed loosely: any tag compiles (and an undeclared one is refused at run time).
  const loose: MultiLockOptions<Order> = { collection: orders, locktimeouts: { read: 1_000 } };
  expectTypeOf<NonNullable<MultiLockAcquireParamsOf<ReturnType<typeof multiLock<Order, undefined, string>>>['tag']>>().toEqualTypeOf<string>();
  await multiLock(loose).acquire({ _id: 'o-1' }, { tag: 'anything' });
  // Relationships written apart (their lists plain strings) compile.
  const relationships = { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } };
  multiLock({ collection: orders, locktimeouts: { read: 1_000, write: 5_000 }, lockRelationships: relationships });

  resourceLocks({ collection: db.collection<{ _id: string }>('locks') });

  // A group's handles carry their documents when the group asked for them: no `!`.
  const moved = await usingAll([{ lock, filter: { _id: 'o-1' } }, { lock, filter: { _id: 'o-2' } }], { document: { total: 1 } }, ([from, to]) => {
    expectTypeOf(from.document).toEqualTypeOf<Pick<WithId<Order>, '_id' | 'total'>>();
    return commitAll([{ $inc: { total: -1 } }, { $inc: { total: 1 } }], from.document.total + to.document.total);
  });
  expectTypeOf(moved).toEqualTypeOf<number>();
}

export async function promiseLibraries(db: Db): Promise<void> {
  // With `monglock/bluebird` imported, a lock made with `Promise: Bluebird` returns bluebird's promises everywhere.
  const lock = writeLock({ collection: db.collection('jobs'), Promise: Bluebird });
  const acquiring = lock.acquire({ _id: 1 });
  expectTypeOf(acquiring).toEqualTypeOf<Bluebird<LockHandle<Document, typeof Bluebird, never>>>();
  const handle = await acquiring.timeout(1_000);
  expectTypeOf(handle.release()).toEqualTypeOf<Bluebird<void>>();
  expectTypeOf(handle.extend()).toEqualTypeOf<Bluebird<typeof handle>>();
  expectTypeOf(lock.release({ _id: 1 })).toEqualTypeOf<Bluebird<void>>();
  expectTypeOf(lock.inspect({ _id: 1 })).toEqualTypeOf<Bluebird<LockInspection>>();
  expectTypeOf(lock.using({ _id: 1 }, {}, async () => 'x')).toEqualTypeOf<Bluebird<string>>();
  const tagged = multiLock({ collection: db.collection('jobs'), locktimeout: 1_000, lockRelationships: { run: {} }, Promise: Bluebird });
  expectTypeOf(tagged.acquire({ _id: 1 }, { tag: 'run' })).toEqualTypeOf<Bluebird<LockHandle<Document, typeof Bluebird, never>>>();
  const resources = resourceLocks({ collection: db.collection('locks'), Promise: Bluebird });
  expectTypeOf(resources.xlock('r', 'g')).toEqualTypeOf<Bluebird<ResourceLockHandle<typeof Bluebird>>>();
  // Without the option: native promises.
  expectTypeOf(writeLock({ collection: db.collection('jobs') }).acquire({ _id: 1 })).toEqualTypeOf<Promise<LockHandle<Document, undefined, never>>>();
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

export function internalsStayInternal(handle: LockHandle): void {
  // @ts-expect-error: handles are made by locks, never constructed by callers
  new LockHandle({ id: 'x', tag: 'write', timestamp: 0, fence: 0, expiresAt: 0 });
  const found: unknown = handle;
  if (found instanceof LockHandle) expectTypeOf(found).toEqualTypeOf<LockHandle<Document, unknown, unknown>>();
}

export async function semaphoresReentrancyAndConversion(db: Db): Promise<void> {
  const orders: Collection<Order> = db.collection<Order>('orders');
  const pool = semaphore({ collection: orders, limit: 4 });
  expectTypeOf(pool).toEqualTypeOf<Semaphore<Order>>();
  const permits = await pool.acquire({ _id: 'o-1' }, { permits: 2, wait: 1_000 });
  expectTypeOf(permits.permits).toEqualTypeOf<number | undefined>();
  // @ts-expect-error: a semaphore's holders are not owned
  await pool.acquire({ _id: 'o-1' }, { owner: 'a' });
  // @ts-expect-error: a semaphore needs its limit
  semaphore({ collection: orders });

  const lock = writeLock({ collection: orders });
  const held = await withOwner('request-1', () => lock.acquire({ _id: 'o-1' }, { owner: 'request-1' }));
  expectTypeOf(held.owner).toEqualTypeOf<string | undefined>();

  const rw = multiLock({ collection: orders, locktimeouts: { read: 1_000, write: 1_000 }, limits: { read: 5 } });
  const reader = await rw.acquire({ _id: 'o-1' }, { tag: 'read' });
  expectTypeOf(await reader.convert('write', { wait: 1_000 })).toEqualTypeOf<LockHandle<Order, undefined, never>>();
  // @ts-expect-error: the tag is the first argument
  await reader.convert({ tag: 'write' });
}
