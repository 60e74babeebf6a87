import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Collection, Db, Document } from 'mongodb';
import type * as Monglock from '../lib';
import type * as ChangeFeeds from '../lib/waiting/change-feed';
import { retryDelay } from '../lib/waiting/wait-options';
import { callbackCollection } from './callback-adapter';
import { floors } from './floors';

const requireHere = createRequire(__filename);

/** The library measured: the built package (`dist/`, what users run) when MONGLOCK_BENCH_DIST=1, else the sources. */
const { commit, isLockError, multiLock, resourceLocks, writeLock } = requireHere(process.env.MONGLOCK_BENCH_DIST === '1' ? '../dist' : '../lib') as typeof Monglock;
const { changeFeedOf } = requireHere(process.env.MONGLOCK_BENCH_DIST === '1' ? '../dist/waiting/change-feed' : '../lib/waiting/change-feed') as typeof ChangeFeeds;

/**
 * Closes the change stream monglock's waiters of this process opened on `collection` (after a
 * run, untimed): it would linger a second into the next run, reading changes for nobody.
 */
export function closeChangeFeed(collection: Collection<Document>): void {
  changeFeedOf(collection, 'lock').close();
}

/** Releases a held lock. */
export type Release = () => Promise<void>;

/** A lock implementation as the benchmark drives it. */
export interface Contender {
  readonly name: string;
  /** Who we are: ours, a peer, or the floor. */
  readonly kind: 'monglock' | 'peer' | 'floor';
  readonly note?: string;
  /** The write concern its lock writes are sent with, as the table shows it. */
  readonly writeConcern: string;
  /** Acquires at `w: 1`: a failover can roll an acquisition back and grant the lock twice (not a baseline). */
  readonly unsafe?: boolean;
  /** Measured on the read-modify-write workload only (a pattern, not a lock to run every workload with). */
  readonly readModifyWriteOnly?: boolean;
  /** Prepares `collection` (and `data`, documents `{ _id: resource, n }`) for these resources (untimed). */
  prepare(collection: Collection<Document>, resources: readonly string[], data: Collection<Document>): Promise<void>;
  /** One attempt: the release, or null when the lock is held (nothing to release). */
  tryLock(resource: string): Promise<Release | null>;
  /** Acquires, waiting as the library lets one wait (or with the shared backoff where it has none). */
  lock(resource: string): Promise<Release>;
  /**
   * A read-modify-write critical section on the resource's document (`n` + 1): by default lock,
   * read it, write it, release; monglock folds the read into the acquisition and the write into
   * the release.
   */
  readModifyWrite?(resource: string): Promise<void>;
}

/** The read-modify-write of a peer: lock, read `data`, write it (majority), release: four commands. */
export function unfoldedReadModifyWrite(contender: Pick<Contender, 'lock'>, data: () => Collection<Document>): (resource: string) => Promise<void> {
  return async (resource) => {
    const release = await contender.lock(resource);
    try {
      const doc = await data().findOne({ _id: resource as never });
      await data().updateOne({ _id: resource as never }, { $set: { n: ((doc?.n as number | undefined) ?? 0) + 1 } }, { writeConcern: { w: 'majority' } });
    } finally {
      await release();
    }
  };
}

const LEASE = 30_000;
const IMPLICIT = 'none sent: majority, implicitly, on a replica set (MongoDB 5.0+)';

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

/** Inserts the documents `{ _id: resource, n: 0 }` (those another process inserted already are left as they are). */
export async function insertDocs(collection: Collection<Document>, resources: readonly string[]): Promise<void> {
  for (let i = 0; i < resources.length; i += 1000) {
    await collection.insertMany(resources.slice(i, i + 1000).map((resource) => ({ _id: resource as never, n: 0 })), { ordered: false }).catch((error: { code?: number }) => {
      if (error.code !== 11000) throw error;
    });
  }
}

/** The contenders of one run, all on collections of `db`. */
export async function contenders(db?: Db): Promise<Contender[]> {
  const list: Contender[] = [];

  list.push(...floors(insertDocs, writeLock, LEASE));

  for (const [fair, changeStreams] of [[false, true], [true, true], [false, false], [true, false]] as const) {
    let lock: ReturnType<typeof writeLock> | undefined;
    list.push({
      name: `${fair ? 'monglock writeLock fair' : 'monglock writeLock'}${changeStreams ? '' : ', polling'}`,
      kind: 'monglock',
      writeConcern: 'acquire majority, release 1',
      note: [fair && 'fair: true, first come first served', !changeStreams && 'changeStreams: false'].filter(Boolean).join('; ') || undefined,
      async prepare(collection, resources) {
        await insertDocs(collection, resources);
        lock = writeLock({ collection, locktimeout: LEASE, changeStreams, ...(fair ? { fair: true } : {}) });
      },
      tryLock: (resource) => lock!.acquire({ _id: resource }).then((held) => () => held.release(), refusedAs('LockAlreadyTaken')),
      lock: (resource) => lock!.acquire({ _id: resource }, { wait: 600_000 }).then((held) => () => held.release()),
      // Folded: the acquisition returns the document, the release writes it (majority): two commands.
      async readModifyWrite(resource) {
        await lock!.using({ _id: resource }, { wait: 600_000, document: { n: 1 } }, (held) => commit({ $set: { n: ((held.document?.n as number | undefined) ?? 0) + 1 } }));
      },
    });
  }

  {
    // The folded section acquired at w: 1: one majority wait (the commit, which re-checks the lock).
    let lock: ReturnType<typeof writeLock> | undefined;
    list.push({
      name: 'monglock writeLock folded, acquire w: 1',
      kind: 'monglock',
      writeConcern: 'acquire 1, commit majority',
      readModifyWriteOnly: true,
      note: 'the read-modify-write acquired at w: 1 and committed at majority: safe for the document, whose every change goes through the commit (see Write concerns)',
      async prepare(collection, resources) {
        await insertDocs(collection, resources);
        lock = writeLock({ collection, locktimeout: LEASE });
      },
      tryLock: (resource) => lock!.acquire({ _id: resource }).then((held) => () => held.release(), refusedAs('LockAlreadyTaken')),
      lock: (resource) => lock!.acquire({ _id: resource }, { wait: 600_000 }).then((held) => () => held.release()),
      async readModifyWrite(resource) {
        await lock!.using({ _id: resource }, { wait: 600_000, w: 1, document: { n: 1 } }, (held) => commit({ $set: { n: ((held.document?.n as number | undefined) ?? 0) + 1 } }));
      },
    });
  }

  for (const tag of ['exclusive', 'shared'] as const) {
    let lock: ReturnType<typeof multiLock> | undefined;
    list.push({
      name: `monglock multiLock ${tag} tag`,
      kind: 'monglock',
      writeConcern: 'acquire majority, release 1',
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
      writeConcern: 'acquire majority, release 1',
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
    // Its CommonJS build: it then loads the `mongodb` the process runs with (driver 7 under
    // MONGLOCK_DRIVER=7), where its ES module build would load driver 6's ObjectId.
    const { LockManager } = requireHere('mongo-locks') as typeof import('mongo-locks');
    let manager: InstanceType<typeof LockManager> | undefined;
    const tryLock = async (resource: string): Promise<Release | null> => {
      const held = await manager!.lock(resource);
      return held ? async () => void (await held.free()) : null;
    };
    let data: Collection<Document> | undefined;
    const contender: Contender = {
      name: 'mongo-locks (coyotte508)',
      kind: 'peer',
      writeConcern: IMPLICIT,
      note: 'no waiting of its own: the shared backoff',
      async prepare(collection, _resources, dataCollection) {
        data = dataCollection;
        manager = new LockManager(collection as never); // typed against its own driver copy
        await manager.lock('warm-up-index').then((held) => held?.free());
      },
      tryLock,
      lock: (resource) => withBackoff(() => tryLock(resource)),
      readModifyWrite: (resource) => unfoldedReadModifyWrite(contender, () => data!)(resource),
    };
    list.push(contender);
  }

  {
    // Clever/mongo-lock-node: RWMutex; lock() polls with `sleepTime`; upsert on lockID.
    const { RWMutex } = await import('mongo-lock-node');
    let collectionRef: Collection<Document> | undefined;
    const clientId = (): string => randomBytes(8).toString('hex');
    const mutex = (resource: string): InstanceType<typeof RWMutex> =>
      new RWMutex(collectionRef as never, resource, clientId(), { sleepTime: 5, expiresAt: null });
    let data: Collection<Document> | undefined;
    const contender: Contender = {
      name: 'mongo-lock-node (Clever)',
      kind: 'peer',
      writeConcern: IMPLICIT,
      note: 'its own polling wait, sleepTime 5 ms (default 1000 ms)',
      async prepare(collection, _resources, dataCollection) {
        data = dataCollection;
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
      readModifyWrite: (resource) => unfoldedReadModifyWrite(contender, () => data!)(resource),
    };
    list.push(contender);
  }

  {
    // andrasq/mongo-lock: insert on _id; E11000 = held; release remove. Driver 4+ removed the
    // insert/update/remove methods and callbacks it uses: it runs through callbackCollection().
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const MongoLock = require('mongo-lock') as new (db: unknown) => {
      getLock(name: string, owner: string, waitMs: number, ttlMs: number, callback: (error: unknown) => void): void;
      releaseLock(name: string, owner: string, callback: (error: unknown) => void): void;
    };
    for (const common of [false, true]) {
      let mongoLock: InstanceType<typeof MongoLock> | undefined;
      let data: Collection<Document> | undefined;
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
      const contender: Contender = {
        name: common ? 'mongo-lock (andrasq), w: majority' : 'mongo-lock (andrasq)',
        kind: 'peer',
        unsafe: !common,
        writeConcern: common ? 'majority (the common write concern)' : '1, its own (unsafe: a failover can roll back an acquisition and grant the lock twice)',
        note: 'driver-3 API: through a callback adapter (one command per call, unchanged, its `{ w: 1 }` passed on); the shared backoff',
        async prepare(collection, _resources, dataCollection) {
          data = dataCollection;
          mongoLock = new MongoLock(callbackCollection(collection, common ? 'majority' : undefined));
        },
        tryLock,
        lock: (resource) => withBackoff(() => tryLock(resource)),
        readModifyWrite: (resource) => unfoldedReadModifyWrite(contender, () => data!)(resource),
      };
      list.push(contender);
    }
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
    let data: Collection<Document> | undefined;
    const contender: Contender = {
      name: 'mongodb-lock (chilts)',
      kind: 'peer',
      writeConcern: IMPLICIT,
      note: 'driver-3 API: through a callback adapter (one command per call, unchanged); the shared backoff',
      async prepare(collection, _resources, dataCollection) {
        data = dataCollection;
        adapted = callbackCollection(collection);
        locksByName.clear();
        await new Promise<void>((done, fail) => lockFor('index').ensureIndexes((e) => (e ? fail(e) : done())));
      },
      tryLock,
      lock: (resource) => withBackoff(() => tryLock(resource)),
      readModifyWrite: (resource) => unfoldedReadModifyWrite(contender, () => data!)(resource),
    };
    list.push(contender);
  }

  return list;
}
