import { BSON, type Document } from 'mongodb';
import { compareBson } from '../common/bson-order';
import { isLockError, lockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import { extendOperation } from '../protocol/extend';
import type { LockData } from '../protocol/lock-data';
import type { LockOperation } from '../protocol/operation';
import type { StoredLock } from '../protocol/stored-format';
import type { LockEngine } from './lock-engine';
import { skewError } from './stamped-write';
import { neverSent } from './write-failures';
import { SERVER_NOW } from './store';

/** A lease's new end, and when (by the server's clock) it was seen applied. */
export interface BatchExtension {
  readonly expiresAt: number;
  readonly appliedAt: number;
}

/** One lock a batch extends. */
export interface BatchMember {
  /** The locked document's address (`_id`, shard key). */
  readonly target: Document;
  readonly lock: LockData;
  /** The lease to extend it to, in ms. */
  readonly lease: number;
  /** ms before the lease may end (by the upper bound of the server's clock) at which its keeper gives up. */
  readonly marginMs: number;
  /** The single extension (findAndModify): what a lock the read-back shows not extended falls back to; it explains a refusal and retries a refused stamp. */
  readonly single: () => Promise<BatchExtension>;
  /** Aborted when its keeper stops: a member not yet sent is left out. */
  readonly signal?: AbortSignal;
}

/** A member waiting for its batch, with how to settle it (undefined: not sent). */
export interface Queued extends BatchMember {
  readonly resolve: (extension: BatchExtension | undefined) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Sends one batch of lease extensions: ONE bulk `update` command (`ordered: false`) with, per lock,
 * exactly the statement a single extension sends ({@link extendOperation}: its proof, the stamp
 * within its tolerance below `$$NOW`, `judged`, pruning, its document's address), all under one
 * stamp taken from the lower bound of the server's clock right before the bulk leaves; then ONE
 * read-back of the batch's documents by `_id`, on the primary, which tells per lock whether its
 * entry carries the expiry its statement wrote (or a later one) and is not dead by `judged`:
 * extended. Every other lock falls back to its single extension (which explains a refusal, or
 * retries a refused stamp), alone. A lost bulk reply (error, deadline) is settled by the same
 * read-back. The read-back's `$$NOW` feeds the clock bounds, timed from when the bulk left.
 */
export class LeaseBatch {
  /** ms from a batch's stamp to its read-back's reply (smoothed): how long a batch is expected to take. */
  private tookMs = 0;

  constructor(private readonly engine: LockEngine) {}

  /** ms a batch is expected to take, from its stamp to its read-back's reply, by the batches so far. */
  expectedMs(): number {
    return Math.ceil(this.tookMs);
  }

  /**
   * How far behind `$$NOW` the batch's stamp may be when a statement of it runs: the wide tolerance
   * a single extension is retried with after a refusal for lateness (half the lease, at most 5 s).
   * A bulk waits on the server for the statements before it (and a server may read `$$NOW` per
   * statement): a tight tolerance would refuse the end of a long bulk, and every lock it refused
   * would then be extended singly, at the moment the server is busiest. Lateness costs nothing
   * else here: a statement extends only a live entry of its own lock, a bulk whose reply came can
   * land no later, and after a lost reply the earlier of the two expiries is reported.
   */
  private tolerance(lease: number): number {
    return this.engine.clock.tolerance(lease, true);
  }

  /** Extends `members` (one command and one read); settles every one of them; never rejects. */
  async send(members: readonly Queued[], call: ResolvedCallOptions): Promise<void> {
    try {
      await this.engine.deployment.ready(call);
      // A lock alone is extended as it always was: one findAndModify, whose reply tells.
      if (members.length === 1 || !this.clockReady()) return members.forEach((member) => settleSingly(member));
      await this.extend(members, call);
    } catch (error) {
      // What fails here (learning the deployment) is an outage to the keepers, never a refusal.
      const failure = isLockError(error) ? error : lockError('DbError', call.boom, { cause: error, detail: 'a batch of lease extensions could not be sent' });
      members.forEach((member) => member.reject(failure));
    }
  }

  /**
   * True when a stamp needs no read first: the bounds are known and, with several clocks, a
   * shard's clock was seen lately (else each lock goes singly, where {@link runStamped} reads
   * them first), and no skew beyond the one assumed was seen (a single extension reports it).
   */
  private clockReady(): boolean {
    const { clock } = this.engine;
    if (!clock.synchronized || clock.excessSkew() !== undefined) return false;
    return !clock.severalClocks || (clock.sawBothClocks && !clock.shardClockStale);
  }

  private async extend(members: readonly Queued[], keeperCall: ResolvedCallOptions): Promise<void> {
    const { clock, paths, store, tags } = this.engine;
    // Extensions leave the client's queue of lock commands before attempts (lib/engine/command-gate.ts).
    const call: ResolvedCallOptions = { ...keeperCall, priority: 'extend' };
    let planned: Array<{ member: Queued; operation: LockOperation; exp: number }> = [];
    let sentAt = 0;
    // The stamp is taken as the bulk leaves the queue, never while it waits there.
    const bulk = (): Promise<void> => {
      const stamp = clock.stamp();
      const at = new Date(stamp);
      planned = members.map((member) => {
        const tolerance = this.tolerance(member.lease);
        const exp = new Date(clock.expiry(stamp, member.lease));
        const rule = this.engine.rule(member.lock.tag);
        const operation: LockOperation = extendOperation({ paths, rule, tags, target: member.target, proof: { id: member.lock.id }, at, tolerance, exp, raiseOnly: true });
        return { member, operation, exp: exp.getTime() };
      });
      sentAt = clock.local();
      return store.bulkApply(planned.map(({ operation }) => operation), call);
    };
    // A lost reply (an error, the deadline) is settled by the read-back: a statement may have landed.
    const outcome = await store.admitted(call, bulk).then(
      () => 'replied' as const,
      (error: unknown) => (neverSent(error) ? error : ('lost' as const)),
    );
    // Never sent (its deadline passed in the client's queue): an outage to the keepers, which try again while their leases last (no single extension into a congested client).
    if (outcome !== 'replied' && outcome !== 'lost') {
      const failure = lockError('DbError', call.boom, { cause: outcome, detail: 'a batch of lease extensions waited out its timeout in the client\'s queue of lock commands: it was never sent' });
      return members.forEach((member) => member.reject(failure));
    }
    const replied = outcome === 'replied';
    let seen: Awaited<ReturnType<typeof store.readBack>>;
    try {
      seen = await store.readBack(uniqueIds(members), call);
    } catch {
      return planned.forEach(({ member, exp }) => settleSingly(member, replied ? undefined : exp));
    }
    const serverNow = seen.value.map((doc) => doc[SERVER_NOW] as unknown).find((now): now is Date => now instanceof Date);
    if (serverNow) clock.observe(serverNow, sentAt, seen.arrivedAt, 'read');
    if (replied) this.tookMs += (seen.arrivedAt - sentAt - this.tookMs) / 4;
    const skew = clock.excessSkew();
    if (skew !== undefined) return members.forEach((member) => member.reject(skewError(skew, clock.skew, call)));
    const docs = new ById<Document>();
    for (const doc of seen.value) docs.add(doc._id, doc);
    for (const { member, exp } of planned) {
      const doc = documentOf(docs, member.target);
      if (serverNow && doc && carries(paths.read(doc), member.lock, exp)) member.resolve({ expiresAt: exp, appliedAt: serverNow.getTime() });
      // Its keeper gives up now whatever a single extension says: none is sent into a congested server.
      else if (clock.remaining(member.lock.expiresAt) <= member.marginMs) member.resolve(undefined);
      else settleSingly(member, replied ? undefined : exp);
    }
  }
}

/**
 * Settles `member` by its single extension. After a lost bulk reply its statement may still land
 * (with the expiry `bulkExp`) after the single one: the earlier of the two is reported.
 */
function settleSingly(member: Queued, bulkExp?: number): void {
  member.single().then(
    (extension) => member.resolve(bulkExp === undefined ? extension : { ...extension, expiresAt: Math.min(extension.expiresAt, bulkExp) }),
    (error: unknown) => member.reject(error),
  );
}

/** True when `lock`'s entry in `stored` carries an expiry at or after `exp` and is not dead by the document's `judged` stamp. */
function carries(stored: StoredLock, lock: LockData, exp: number): boolean {
  const entry = stored.tags?.[lock.tag]?.find((candidate) => candidate.id === lock.id);
  const judged = stored.judged instanceof Date ? stored.judged.getTime() : 0;
  return entry?.exp instanceof Date && entry.exp.getTime() >= exp && entry.exp.getTime() > judged;
}

/** The `_id`s of the members' documents, each once (an id written two ways BSON holds equal may be named twice: harmless in `$in`). */
function uniqueIds(members: readonly Queued[]): unknown[] {
  const byKey = new Map<string, unknown>();
  for (const { target } of members) byKey.set(BSON.EJSON.stringify(target._id), target._id);
  return [...byKey.values()];
}

/** The document read back that `target` addresses: its `_id` and every shard key value it names. */
function documentOf(docs: ById<Document>, target: Document): Document | undefined {
  return docs.find(target._id, (doc) => Object.keys(target).every((path) => compareBson(valueAt(doc, path) ?? null, target[path]) === 0));
}

/** Values filed by an `_id`: candidates by its relaxed Extended JSON, then the exact check (BSON equality). */
class ById<T> {
  private readonly byKey = new Map<string, T[]>();

  add(id: unknown, value: T): void {
    const key = BSON.EJSON.stringify(id);
    this.byKey.set(key, [...(this.byKey.get(key) ?? []), value]);
  }

  find(id: unknown, matches: (value: T) => boolean): T | undefined {
    // Values BSON holds equal can differ in JSON (an int and a decimal): then every value is tried.
    return this.byKey.get(BSON.EJSON.stringify(id))?.find(matches) ?? this.all().find(matches);
  }

  all(): T[] {
    return [...this.byKey.values()].flat();
  }
}

function valueAt(doc: Document, path: string): unknown {
  return path.split('.').reduce<unknown>((value, part) => (value && typeof value === 'object' ? (value as Document)[part] : undefined), doc);
}
