import { randomBytes } from 'node:crypto';
import type { Collection, Db, Document } from 'mongodb';
import { isLockError, multiLock, resourceLocks, writeLock } from '../lib';
import { retryDelay } from '../lib/waiting';
import { callbackCollection } from './callback-adapter';

/** Releases a held lock. */
export type Release = () => Promise<void>;

/** A lock implementation as the benchmark drives it. */
export interface Contender {
  readonly name: string;
  /** Who we are: ours, a peer, or the floor. */
  readonly kind: 'monglock' | 'peer' | 'floor';
  readonly note?: string;
  /** Prepares `collection` for these resources (untimed). */
  prepare(collection: Collection<Document>, resources: readonly string[]): Promise<void>;
  /** One attempt: the release, or null when the lock is held (nothing to release). */
  tryLock(resource: string): Promise<Release | null>;
  /** Acquires, waiting as the library lets one wait (or with the shared backoff where it has none). */
  lock(resource: string): Promise<Release>;
}

const LEASE = 30_000;

/** Waits with monglock's backoff (4 ms doubling to 150 ms, jittered): the same policy for every library that has none. */
async function withBackoff(attempt: () => Promise<Release | null>): Promise<Release> {
  for (let count = 1; ; count++) {
    const release = await attempt();
    if (release) return release;
    await new Promise((resolve) => setTimeout(resolve, retryDelay(count)));
  }
}

function refusedAs(subtype: string) {
  return (error: unknown): null => {
    if (isLockError(error, subtype as never)) return null;
    throw error;
  };
}

async function insertDocs(collection: Collection<Document>, resources: readonly string[]): Promise<void> {
  for (let i = 0; i < resources.length; i += 1000) {
    await collection.insertMany(resources.slice(i, i + 1000).map((resource) => ({ _id: resource as never })));
  }
}

/** The contenders of one run, all on collections of `db`. */
export async function contenders(db?: Db): Promise<Contender[]> {
  const list: Contender[] = [];

  {
    let floor: Collection<Document> | undefined;
    const roundTrip = async (resource: string): Promise<void> => {
      await floor!.findOneAndUpdate({ _id: resource as never }, { $inc: { n: 1 } });
    };
    const tryLock = async (resource: string): Promise<Release> => {
      await roundTrip(resource);
      return () => roundTrip(resource);
    };
    list.push({
      name: 'floor: findOneAndUpdate',
      kind: 'floor',
      note: 'a bare findOneAndUpdate per "acquire" and per "release", no exclusion: the least any lock can cost',
      async prepare(collection, resources) {
        await insertDocs(collection, resources);
        floor = collection;
      },
      tryLock,
      lock: tryLock,
    });
  }

  {
    let lock: ReturnType<typeof writeLock> | undefined;
    list.push({
      name: 'monglock writeLock',
      kind: 'monglock',
      async prepare(collection, resources) {
        await insertDocs(collection, resources);
        lock = writeLock({ collection, locktimeout: LEASE });
      },
      tryLock: (resource) => lock!.acquire({ _id: resource }).then((held) => () => held.release(), refusedAs('LockAlreadyTaken')),
      lock: (resource) => lock!.acquire({ _id: resource }, { wait: 600_000 }).then((held) => () => held.release()),
    });
  }

  for (const tag of ['exclusive', 'shared'] as const) {
    let lock: ReturnType<typeof multiLock> | undefined;
    list.push({
      name: `monglock multiLock ${tag} tag`,
      kind: 'monglock',
      note: tag === 'shared' ? 'a tag concurrent with itself: holders never exclude each other' : undefined,
      async prepare(collection, resources) {
        await insertDocs(collection, resources);
        lock = multiLock({
          collection,
          locktimeouts: { exclusive: LEASE, shared: LEASE },
          lockRelationships: { exclusive: { cooperative: ['exclusive', 'shared'] }, shared: { cooperative: ['exclusive'] } },
        });
      },
      tryLock: (resource) => lock!.acquire({ _id: resource }, { tag }).then((held) => () => held.release(), refusedAs('CooperativeLock')),
      lock: (resource) => lock!.acquire({ _id: resource }, { tag, wait: 600_000 }).then((held) => () => held.release()),
    });
  }

  {
    let locks: ReturnType<typeof resourceLocks> | undefined;
    const id = (): string => randomBytes(8).toString('hex');
    list.push({
      name: 'monglock resourceLocks xlock',
      kind: 'monglock',
      async prepare(collection) {
        locks = resourceLocks({ collection });
        await locks.createIndexes();
      },
      tryLock: (resource) => locks!.xlock(resource, id(), { ttl: LEASE }).then((held) => () => held.release(), refusedAs('LockAlreadyTaken')),
      lock: (resource) => locks!.xlock(resource, id(), { ttl: LEASE, wait: 600_000 }).then((held) => () => held.release()),
    });
  }

  list.push(...(await peers(db)));
  return list;
}

async function peers(_db?: Db): Promise<Contender[]> {
  const list: Contender[] = [];

  {
    // coyotte508/mongo-locks: insertOne on a unique `action`; E11000 = held; release deleteOne.
    const { LockManager } = await import('mongo-locks');
    let manager: InstanceType<typeof LockManager> | undefined;
    const tryLock = async (resource: string): Promise<Release | null> => {
      const held = await manager!.lock(resource);
      return held ? async () => void (await held.free()) : null;
    };
    list.push({
      name: 'mongo-locks (coyotte508)',
      kind: 'peer',
      note: 'no waiting of its own: the shared backoff',
      async prepare(collection) {
        manager = new LockManager(collection);
        await manager.lock('warm-up-index').then((held) => held?.free());
      },
      tryLock,
      lock: (resource) => withBackoff(() => tryLock(resource)),
    });
  }

  {
    // Clever/mongo-lock-node: RWMutex; lock() polls with `sleepTime`; upsert on lockID.
    const { RWMutex } = await import('mongo-lock-node');
    let collectionRef: Collection<Document> | undefined;
    const clientId = (): string => randomBytes(8).toString('hex');
    const mutex = (resource: string): InstanceType<typeof RWMutex> =>
      new RWMutex(collectionRef as never, resource, clientId(), { sleepTime: 5, expiresAt: null });
    list.push({
      name: 'mongo-lock-node (Clever)',
      kind: 'peer',
      note: 'its own polling wait, sleepTime 5 ms (default 1000 ms)',
      async prepare(collection) {
        collectionRef = collection;
        await collection.createIndex({ lockID: 1 }, { unique: true });
      },
      async tryLock(resource) {
        const held = mutex(resource);
        try {
          await held.tryOverrideLockWriter('', true);
          return () => held.unlock();
        } catch (error) {
          if (/lock|11000|duplicate/i.test(String((error as Error)?.message))) return null;
          throw error;
        }
      },
      async lock(resource) {
        const held = mutex(resource);
        await held.lock();
        return () => held.unlock();
      },
    });
  }

  {
    // andrasq/mongo-lock: insert on _id; E11000 = held; release remove. Driver 4+ removed the
    // insert/update/remove methods and callbacks it uses: it runs through callbackCollection().
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const MongoLock = require('mongo-lock') as new (db: unknown) => {
      getLock(name: string, owner: string, waitMs: number, ttlMs: number, callback: (error: unknown) => void): void;
      releaseLock(name: string, owner: string, callback: (error: unknown) => void): void;
    };
    let mongoLock: InstanceType<typeof MongoLock> | undefined;
    const tryLock = (resource: string): Promise<Release | null> =>
      new Promise((resolve, reject) => {
        const owner = randomBytes(8).toString('hex');
        // Success is a callback without error; a held lock is its E11000 error.
        mongoLock!.getLock(resource, owner, 0, LEASE, (error) => {
          if ((error as { code?: number } | null)?.code === 11000) return resolve(null);
          if (error) return reject(error);
          resolve(() => new Promise<void>((done, fail) => mongoLock!.releaseLock(resource, owner, (e) => (e ? fail(e) : done()))));
        });
      });
    list.push({
      name: 'mongo-lock (andrasq)',
      kind: 'peer',
      note: 'driver-3 API: through a callback adapter (one command per call, unchanged); the shared backoff',
      async prepare(collection) {
        mongoLock = new MongoLock(callbackCollection(collection));
      },
      tryLock,
      lock: (resource) => withBackoff(() => tryLock(resource)),
    });
  }

  {
    // chilts/mongodb-lock: one lock object per name; findOneAndUpdate(expired) + insertOne.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mongodbLock = require('mongodb-lock') as (col: unknown, name: string, opts: object) => {
      ensureIndexes(callback: (error: unknown) => void): void;
      acquire(callback: (error: unknown, code?: string | null) => void): void;
      release(code: string, callback: (error: unknown, ok?: boolean) => void): void;
    };
    let adapted: ReturnType<typeof callbackCollection> | undefined;
    const locksByName = new Map<string, ReturnType<typeof mongodbLock>>();
    const lockFor = (resource: string): ReturnType<typeof mongodbLock> => {
      let lock = locksByName.get(resource);
      if (!lock) locksByName.set(resource, (lock = mongodbLock(adapted, resource, { timeout: LEASE })));
      return lock;
    };
    const tryLock = (resource: string): Promise<Release | null> =>
      new Promise((resolve, reject) => {
        const lock = lockFor(resource);
        lock.acquire((error, code) => {
          if (error) return reject(error);
          resolve(code ? () => new Promise<void>((done, fail) => lock.release(code, (e) => (e ? fail(e) : done()))) : null);
        });
      });
    list.push({
      name: 'mongodb-lock (chilts)',
      kind: 'peer',
      note: 'driver-3 API: through a callback adapter (one command per call, unchanged); the shared backoff',
      async prepare(collection) {
        adapted = callbackCollection(collection);
        locksByName.clear();
        await new Promise<void>((done, fail) => lockFor('index').ensureIndexes((e) => (e ? fail(e) : done())));
      },
      tryLock,
      lock: (resource) => withBackoff(() => tryLock(resource)),
    });
  }

  return list;
}
