import type { Document } from 'mongodb';
import { isLockError, lockError } from '../common/errors';
import type { ResolvedCallOptions } from '../common/options';
import type { LockData } from '../protocol/lock-data';
import { newLockId } from '../protocol/lock-ids';
import { holdFenceOperation, holdsOf, MAX_HOLDS, reenterOperation } from '../protocol/reentry';
import { undeadEntries } from '../protocol/stored-format';
import { landing, withDocument, type Acquired, type AssertivePending } from './acquired';
import type { AcquireExtras, LockEngine } from './lock-engine';
import { noDocument, ownerMayRetry } from './refusals';
import { laterStampVerdict, stampLag, stampRefused } from './stamp-refusals';
import { observeWrite } from './stamped-write';
import type { Timed } from './store';
import { failedAcquisition } from './write-failures';
import { quarantinedVerdict } from './quarantined';

/** How many times an owner's acquisition reads the document again after the lock changed under it. */
const OWNED_ROUNDS = 6;
/** From this round on, a first hold is not pinned to the counter it read (other acquisitions kept moving it): its token is set after. */
const UNPINNED_FROM = 3;
/** How many times, 20 ms apart, an owner waits for its first hold's token to be set (by its other process) before it reports a conflict. */
const TOKEN_ROUNDS = 50;

/**
 * A reentrant acquisition by `owner`: reads the document (on the primary, with the server's
 * clock); if the owner holds a live lock of `tag` there, adds a nested hold with the same fencing
 * token ({@link reenterOperation}); otherwise takes a first hold, pinned to the fencing counter it
 * read, so that its entry can keep the token it gets. When the lock changed in between (the owner
 * took it in another process, its holds ended, the counter moved on), it reads again, a few times;
 * after two moves of the counter, its first hold is taken unpinned and its token set by one more
 * update ({@link holdFenceOperation}). Two commands (a read and a write), where an acquisition
 * without owner takes one.
 */
export async function acquireOwned(engine: LockEngine, filter: Document, tag: string, lease: number, call: ResolvedCallOptions, extras: AcquireExtras, owner: string): Promise<Acquired | AssertivePending> {
  let tokenRounds = 0;
  for (let round = 1; ; ) {
    const seen = await engine.read(filter, call);
    if (!seen.value) throw noDocument(call.boom).error;
    const stored = engine.paths.read(seen.value);
    const [outer] = holdsOf(stored, tag, owner, seen.serverNow?.getTime() ?? engine.clock.lower());
    if (outer && outer.fence === undefined) {
      // Its first hold's token is being set (taken unpinned, in another process): not a hold to nest in yet.
      if (++tokenRounds > TOKEN_ROUNDS) throw lockError(engine.conflict, call.boom, { detail: `owner ${owner}'s first hold has no token yet (is its process gone?)` });
      await new Promise((resolve) => setTimeout(resolve, 20));
      continue;
    }
    try {
      if (!outer) {
        const pinned = round < UNPINNED_FROM;
        const won = await engine.acquire(filter, tag, lease, call, { ...extras, owned: { owner, counter: pinned ? (stored.fence ?? 0) : undefined } });
        if (!pinned) await setHoldFence(engine, won, call);
        return won;
      }
      // A nested hold has no minimum hold of its own: the caller that asks for one is told, before anything is written.
      if (extras.minHold !== undefined) throw new TypeError(`Expected no \`params.minHold\` for a nested hold: owner \`${owner}\` holds this lock already, and a nested hold takes no minimum hold of its own (take it with the owner's first hold)`);
      return await reenter(engine, engine.deployment.addressOf(seen.value), tag, owner, outer.fence!, lease, call, extras.document);
    } catch (error) {
      const changed = ownerMayRetry(error) || (outer !== undefined && isLockError(error, 'LockNotFound'));
      if (!changed || round === OWNED_ROUNDS) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 2 * round++));
    }
  }
}

/**
 * Sets the token of a first hold taken unpinned. If that fails, the acquisition fails with a
 * `DbError` that carries the hold (`err.lock`), which the acquisition releases as it releases a
 * lock whose reply was lost (retried until it lands): a hold without a token could never be nested in.
 */
async function setHoldFence(engine: LockEngine, won: Acquired | AssertivePending, call: ResolvedCallOptions): Promise<void> {
  let failure: unknown;
  try {
    if (await engine.store.applyOne(holdFenceOperation(engine.paths, won.target, won.lock.tag, won.lock.id, won.lock.fence), call)) return;
  } catch (error) {
    failure = error;
  }
  const written: Acquired = { lock: won.lock, target: won.target, landsBy: won.lock.timestamp };
  const detail = `the owner's first hold was taken, but its fencing token could not be stored${failure instanceof Error ? ` (${failure.message})` : ' (the hold is gone)'}: it is being released (err.lock)`;
  throw lockError('DbError', call.boom, { cause: failure, detail, lock: written });
}

/**
 * A nested hold of `owner`, which holds a live lock of `tag` with token `fence` in the document
 * `target`: its own entry, id and lease, the same token. Rejects with `LockNotFound` when the
 * owner's holds ended meanwhile, `TooManyHolds` at {@link MAX_HOLDS}, the engine's conflict while
 * the owner's lock still waits for tags it asserts over.
 */
async function reenter(engine: LockEngine, target: Document, tag: string, owner: string, fence: number, lease: number, call: ResolvedCallOptions, document?: Document | true): Promise<Acquired> {
  const { paths, store, clock } = engine;
  const rule = engine.rule(tag);
  const id = newLockId();
  return engine.stamped(call, {
    target,
    lease,
    write: async (stamp, tolerance) => {
      const entry = { id, at: new Date(stamp), exp: new Date(clock.expiry(stamp, lease)) };
      const lock: LockData = { id, tag, timestamp: stamp, fence, expiresAt: entry.exp.getTime(), owner };
      let reply: Timed<Document | null>;
      try {
        reply = await store.apply(reenterOperation({ paths, rule, tags: engine.tags, target, owner, fence, entry, tolerance }), call, call.w, document);
      } catch (error) {
        throw failedAcquisition(error, call.boom, { lock, target, ...landing(stamp, tolerance, call) } satisfies Acquired);
      }
      if (!reply.value) return undefined;
      observeWrite({ paths, clock }, reply.value, reply);
      await engine.deployment.refuseSkewed(call, () => engine.release(target, tag, { id }, lock, call));
      return withDocument({ lock, target, nested: true }, reply.value, paths.field, document, store.shardKey) as Acquired;
    },
    explain: (seen, stamp, tolerance) => {
      if (!seen.value) return noDocument(call.boom);
      const stored = paths.read(seen.value);
      const now = seen.serverNow?.getTime() ?? stamp;
      const quarantined = quarantinedVerdict(stored, now, call.boom, seen.value._id);
      if (quarantined) return quarantined;
      const holds = holdsOf(stored, tag, owner, now).filter((hold) => hold.fence === fence);
      if (holds.length === 0) return { retry: false, error: lockError('LockNotFound', call.boom, { detail: `owner ${owner}'s holds ended` }) };
      if (holds.length >= MAX_HOLDS) {
        return { retry: false, error: lockError('TooManyHolds', call.boom, { detail: `owner ${owner} holds ${holds.length} nested locks of tag ${tag}, the most allowed (${MAX_HOLDS}): is a release missing?` }) };
      }
      const asserted = rule.assertive.filter((other) => undeadEntries(stored, other).length > 0);
      if (asserted.length > 0) return { retry: false, error: lockError(engine.conflict, call.boom, { detail: `owner ${owner}'s lock still waits for tag ${asserted.join(', ')}` }) };
      const latest = rule.exclusive ? Math.max(0, ...(stored.recent?.[tag] ?? []).map((date) => date.getTime())) : 0;
      if (latest > stamp) return laterStampVerdict(seen, latest, lockError(engine.conflict, call.boom, { detail: 'held when the update ran' }));
      if (stampRefused(seen, stamp, tolerance)) return { retry: true, why: stampLag(seen, stamp, tolerance, lease) };
      // The owner's holds changed between the update and this read: the caller reads again.
      return { retry: false, error: lockError('LockNotFound', call.boom, { detail: `owner ${owner}'s holds changed meanwhile` }) };
    },
  });
}
