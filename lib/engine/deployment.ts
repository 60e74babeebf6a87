import type { Collection, Document } from 'mongodb';
import { lockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { ServerClock } from '../protocol/server-clock';
import { addressFromFilter, addressOf } from './address';
import { refuseExcessSkew } from './stamped-write';
import { withDeadline, type Store } from './store';
import { classifyWriteFailure, describeWriteFailure } from './write-failures';

/**
 * The skew assumed between the clocks of a sharded cluster (every mongos and every shard's
 * primary) when `maxClockSkew` is not given, in ms. NTP keeps them within tens of ms; this
 * covers a host whose clock drifted by up to a second. It only delays taking over a lock whose
 * holder never released it (by about 4 ×), never a holder's lease.
 */
export const SHARDED_CLOCK_SKEW = 1_000;

/** What monglock must know of the deployment behind a collection. */
export interface Deployment {
  /** Commands go through mongos: `$$NOW` is the router's clock, `$currentDate` the shard's. */
  readonly sharded: boolean;
  /**
   * The fields of the collection's shard key (dot paths; empty when it is not sharded): every
   * write to a locked document names their values, as mongos needs on 4.4–6.x.
   */
  readonly shardKey: readonly string[];
  /** The largest skew assumed between the deployment's clocks, in ms (0: one clock). */
  readonly maxClockSkew: number;
}

/** What the lock's options say of the deployment (`maxClockSkew`, `shardKey`); the rest is asked of the server. */
export interface DeploymentOptions {
  readonly maxClockSkew?: number;
  /** The shard key's fields, as `sh.shardCollection` took them (`{ region: 1, _id: 1 }`). */
  readonly shardKey?: Readonly<Record<string, unknown>>;
}

/** Per driver client: whether its commands go through mongos (one `hello` per client). */
const routedClients = new WeakMap<object, Promise<boolean>>();

/**
 * Learns, once per lock and before its first write, the deployment a collection lives in: whether
 * it is a sharded cluster (a `hello` per driver client) and, if so, the collection's shard key
 * (`config.collections`). What the options say is not asked. A failure is not kept: the next
 * call asks again.
 */
export class DeploymentProbe {
  #known: Deployment | undefined;
  #pending: Promise<Deployment> | undefined;

  constructor(
    private readonly collection: Collection<Document>,
    private readonly given: DeploymentOptions,
  ) {
    if (given.maxClockSkew !== undefined && given.shardKey !== undefined) {
      this.#known = { sharded: given.maxClockSkew > 0, shardKey: shardKeyFields(given.shardKey), maxClockSkew: given.maxClockSkew };
    }
  }

  /** The deployment, once known. */
  get known(): Deployment | undefined {
    return this.#known;
  }

  /** Resolves the deployment, asking the server the first time (bounded by `timeoutMs`). */
  resolve(timeoutMs: number): Promise<Deployment> {
    if (this.#known) return Promise.resolve(this.#known);
    this.#pending ??= this.probe(timeoutMs).then(
      (deployment) => (this.#known = deployment),
      (error: unknown) => {
        this.#pending = undefined;
        throw error;
      },
    );
    return this.#pending;
  }

  private async probe(timeoutMs: number): Promise<Deployment> {
    const sharded = await isRouted(this.collection, timeoutMs);
    const maxClockSkew = this.given.maxClockSkew ?? (sharded ? SHARDED_CLOCK_SKEW : 0);
    if (this.given.shardKey !== undefined) return { sharded, shardKey: shardKeyFields(this.given.shardKey), maxClockSkew };
    const key = sharded ? await shardKeyOf(this.collection, timeoutMs).catch((error: unknown) => Promise.reject(unreadableShardKey(this.collection, error))) : undefined;
    return { sharded, shardKey: key ? shardKeyFields(key) : [], maxClockSkew };
  }
}

/** The error of a shard key that could not be read from the cluster's metadata: it says what to give instead. */
function unreadableShardKey(collection: Collection<Document>, error: unknown): Error {
  const message = error instanceof Error ? error.message : String(error);
  return new Error(
    `could not read the shard key of ${collection.dbName}.${collection.collectionName} from config.collections (${message}): ` +
      'give the lock its `shardKey` option (the pattern sh.shardCollection took, `{ _id: 1 }` for a collection that is not sharded)',
    { cause: error },
  );
}

/** The fields of a shard key pattern. */
export function shardKeyFields(pattern: Readonly<Record<string, unknown>>): string[] {
  return Object.keys(pattern);
}

/** Whether `collection`'s client talks to mongos (`hello`, or `isMaster` on servers that lack it, answers `msg: 'isdbgrid'`). */
export function isRouted(collection: Collection<Document>, timeoutMs: number): Promise<boolean> {
  const key: object = collection.db.client ?? collection.db;
  let routed = routedClients.get(key);
  if (!routed) {
    routed = helloOf(collection, timeoutMs).then((reply) => reply.msg === 'isdbgrid');
    routedClients.set(key, routed);
    routed.catch(() => routedClients.delete(key));
  }
  return routed;
}

/** The server's `hello` reply (`isMaster` where `hello` is not a command: before 4.4.2, and some compatible servers). */
export async function helloOf(collection: Collection<Document>, timeoutMs: number): Promise<Document> {
  const ask = (command: Document): Promise<Document> => withDeadline('hello', timeoutMs, () => collection.db.command(command));
  try {
    return await ask({ hello: 1 });
  } catch (error) {
    if ((error as { code?: unknown }).code !== 59) throw error; // CommandNotFound
    return ask({ isMaster: 1 });
  }
}

/**
 * The shard key pattern of a sharded cluster's collection (`config.collections`), or undefined
 * when the collection is not sharded. Reading it needs the `find` privilege on `config`: without
 * it, the lock's `shardKey` option says it.
 */
export async function shardKeyOf(collection: Collection<Document>, timeoutMs: number): Promise<Document | undefined> {
  const metadata = collection.db.client.db('config').collection('collections');
  const entry = await withDeadline('find', timeoutMs, () =>
    metadata.findOne({ _id: `${collection.dbName}.${collection.collectionName}` as never, dropped: { $ne: true } }, { projection: { key: 1 }, maxTimeMS: timeoutMs }),
  );
  const key: unknown = entry?.key;
  return typeof key === 'object' && key !== null ? (key as Document) : undefined;
}

/**
 * What a lock engine knows of its deployment once the probe answered: the clock's skew and the
 * shard key its replies carry are set from it ({@link ready}); how a locked document is addressed;
 * and the refusal of a skew beyond the one assumed.
 */
export class DeploymentView {
  /** Whether the clock and the store run with what the deployment says (set in the same turn as it is first seen known). */
  #adopted = false;

  constructor(
    private readonly probe: DeploymentProbe,
    private readonly clock: ServerClock,
    private readonly store: Store,
  ) {
    if (probe.known) this.adopt(probe.known);
  }

  /**
   * Resolves once the deployment is known and adopted (the first call of a lock asks the server).
   * Undefined when it is already: no turn is spent, so the order of callers that come together is
   * kept. A caller that finds it known but not yet adopted (the probe answered, and the callers
   * that waited for it have not run yet) adopts it itself, before it sends anything.
   */
  ready(call: ResolvedCallOptions): Promise<void> | undefined {
    if (this.#adopted) return undefined;
    const known = this.probe.known;
    if (known) return this.adopt(known);
    return this.probe.resolve(call.timeout).then(
      (known) => this.adopt(known),
      (error: unknown) => {
        const failure = classifyWriteFailure(error);
        const said = failure === 'closed' || failure === 'not-sent' || failure === 'unsent' ? describeWriteFailure(failure, 'lock') : 'nothing was written';
        throw lockError('DbError', call.boom, { cause: error, detail: `${error instanceof Error ? error.message : String(error)} (learning the deployment before the first write: ${said})` });
      },
    );
  }

  /** How writes after an acquisition address the document `doc` its reply returned ({@link addressOf}). */
  addressOf(doc: Document): Document {
    return addressOf(doc, this.store.shardKey);
  }

  /** How a lock whose reply never came is addressed besides its id ({@link addressFromFilter}). */
  addressFromFilter(filter: Document): Document {
    return addressFromFilter(filter, this.store.shardKey);
  }

  /**
   * Fails the call when the replies so far show clocks further apart than the deployment's assumed
   * skew (a router's `$$NOW` against a shard's `$currentDate`): a stamp taken from them may have
   * judged a live lock expired. `undo` first takes back what the write just took (a lock).
   */
  async refuseSkewed(call: ResolvedCallOptions, undo?: () => Promise<unknown>): Promise<void> {
    if (this.clock.excessSkew() === undefined) return;
    await undo?.().catch(() => undefined);
    refuseExcessSkew(this.clock, call);
  }

  /** Takes what the deployment says: its clocks' skew into the clock bounds, its shard key into the replies. */
  private adopt(known: Deployment): undefined {
    if (this.#adopted) return undefined;
    this.clock.assumeSkew(known.maxClockSkew, known.sharded);
    this.store.shardKey = known.shardKey;
    this.#adopted = true;
    return undefined;
  }
}
