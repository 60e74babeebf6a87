/**
 * A cleanup release (its keeper gave up, its lease about to end: lib/engine/lock-engine.ts) goes
 * with the extensions, never held back with throttled acquisition attempts: the lease it ends may
 * be longer than the client knows (an extension landed after its keeper gave up, a reply was lost
 * and its write landed, a lock passed back as JSON whose lease grew since, the client's clock
 * stepped back). Held back, it could wait out its timeout and leave the lock held for a whole
 * lease while its holder was told the lease ended.
 */
import { expect } from 'chai';
import { writeLock, type WriteLock } from '../../lib';
import { ATTEMPTS_WHILE_BEHIND } from '../../lib/engine/attempt-throttle';
import { commandGateOf } from '../../lib/engine/command-gate';
import { delayedCollection, type DelayPlan } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { gate, isAcquisition, isExtension, whatAnAcquisitionGets } from '../support/lock-commands';

const BLOCKED = Array.from({ length: ATTEMPTS_WHILE_BEHIND }, (_, i) => `b${i}`);

/**
 * A client of its own (its own command gate) on a fresh collection holding `ids`, seen through
 * `reply` and `request` delays; `throttle()` marks its keepers behind and sends as many attempts as the throttle
 * lets in flight, held on their way until `settle()`: any further attempt, or a release sent as a
 * cleanup, waits in the client's queue.
 */
async function congested(reply?: DelayPlan, request?: DelayPlan, ids: string[] = ['held']) {
  const opened = gate();
  const client = await newClient();
  const shared = await freshCollection([...ids, ...BLOCKED].map((_id) => ({ _id })));
  const plain = client.db(shared.dbName).collection(shared.collectionName);
  const slow = delayedCollection(plain, {
    request: (method, n, args) => (isAcquisition(method, args) && BLOCKED.some((id) => names(args, id)) ? opened.promise : request?.(method, n, args)),
    ...(reply && { reply }),
  });
  let attempts: Array<Promise<void>> = [];
  return {
    slow,
    throttle: (locks: WriteLock): void => {
      commandGateOf(plain).keepersBehind(60_000);
      attempts = BLOCKED.map((_id) => locks.acquire({ _id }, { timeout: 30_000 }).then((handle) => handle.release()));
    },
    /** What another client's acquisition of `held` gets now. */
    otherGets: async (): Promise<string> => whatAnAcquisitionGets(writeLock({ collection: (await newClient()).db(plain.dbName).collection(plain.collectionName), timeout: 5_000, changeStreams: false }), { _id: 'held' }),
    settle: async (): Promise<void> => {
      opened.open();
      await Promise.all(attempts);
    },
  };
}

/** True when the call names the document `_id` in its filter. */
const names = (args: readonly unknown[], id: string): boolean => JSON.stringify(args[0]).includes(`"${id}"`);

/** Runs `using()` of `_id` with a body that waits for its lease to be lost, then fails with why; resolves once the body runs. */
async function holding(locks: WriteLock, _id = 'held'): Promise<{ lost: Promise<Error & Record<string, unknown>> }> {
  let inside!: () => void;
  const started = new Promise<void>((resolve) => (inside = resolve));
  const lost = rejectionOf(locks.using({ _id }, {}, (handle, signal) => (inside(), untilLost(handle, signal))));
  await started;
  return { lost };
}

/** A body that waits for its lease to be lost, then fails with why. */
const untilLost = async (_handle: unknown, signal: AbortSignal): Promise<never> => {
  await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
  throw signal.reason;
};

describe('a cleanup release is never held back with throttled attempts', () => {
  it('releases at once, ahead of throttled attempts, a lock whose extension landed after its keeper gave up', async function () {
    this.timeout(60_000);
    let replied!: () => void;
    const extensionReplied = new Promise<void>((resolve) => (replied = resolve));
    // The extension lands, but its reply comes back after the keeper's margin (lease 4 s: sent with 2 s left, given up at 200 ms left).
    const { slow, throttle, otherGets, settle } = await congested((method, _n, args) => (isExtension(method, args) && names(args, 'held') ? sleep(2_600).then(() => replied()) : 0));
    const locks = writeLock({ collection: slow, locktimeout: 4_000, timeout: 30_000, changeStreams: false });
    const { lost } = await holding(locks);
    throttle(locks);
    await extensionReplied;
    // The extension landed (a lease of 4 s from when it was sent): the lock is held on the server
    // until its release is sent. Its holder was told the lease ended: another client may take it
    // once the release is sent, which nothing here holds back.
    await sleep(500);
    const seen = await otherGets();
    await settle();
    expect((await lost).subtype).to.equal('LockNotFound');
    expect(seen).to.equal('acquired');
  });

  it('releases at once, ahead of throttled attempts, a lock whose extensions lost their replies (they landed) before its keeper gave up', async function () {
    this.timeout(60_000);
    // Every extension lands, and its reply comes after the call's 1 s timeout: lost (the keeper sees a store outage).
    const { slow, throttle, otherGets, settle } = await congested((method, _n, args) => (isExtension(method, args) && names(args, 'held') ? 1_500 : 0));
    const locks = writeLock({ collection: slow, locktimeout: 4_000, timeout: 1_000, changeStreams: false });
    const { lost } = await holding(locks);
    throttle(locks);
    // The last extension landed with a lease of 4 s: the lock is held on the server until its release is sent.
    const why = await lost;
    const seen = await otherGets();
    await settle();
    expect(why.subtype).to.equal('DbError');
    expect(seen).to.equal('acquired');
  });

  it('releases at once, ahead of throttled attempts, a lock passed back as JSON whose lease was extended since', async function () {
    this.timeout(60_000);
    const { slow, throttle, otherGets, settle } = await congested();
    const locks = writeLock({ collection: slow, locktimeout: 500, timeout: 1_000, changeStreams: false });
    const handle = await locks.acquire({ _id: 'held' });
    // As a later HTTP request has it: the JSON the acquisition gave, its lease since extended to 20 s.
    const json = JSON.parse(JSON.stringify(handle)) as ReturnType<typeof handle.toJSON>;
    await handle.extend(20_000);
    await sleep(600);
    throttle(locks);
    await sleep(200);
    const released = await rejectionOf(locks.release({ _id: 'held' }, { lock: json })).catch(() => 'released');
    const seen = await otherGets();
    await settle();
    expect(released).to.equal('released');
    expect(seen).to.equal('acquired');
  });

  it('releases at once, ahead of throttled attempts, locks whose batch lost its reply and was read back unextended as their keepers gave up (it may land)', async function () {
    this.timeout(60_000);
    const bulk = gate();
    let readBack!: () => void;
    const readBackCame = new Promise<void>((resolve) => (readBack = resolve));
    // The batch's bulk waits on its way past its 4.8 s timeout (a lost reply); the read-back finds
    // neither lock extended, with less than their margin left; the bulk then lands (within its
    // stamp's tolerance, half the lease): a lease of 10 s from its stamp.
    const { slow, throttle, otherGets, settle } = await congested(
      (method) => (method === 'aggregate' ? (bulk.open(), readBack(), 0) : 0),
      (method) => (method === 'bulkWrite' ? bulk.promise : 0),
      ['held', 'held2'],
    );
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 4_800, changeStreams: false });
    const [first, second] = await Promise.all([holding(locks), holding(locks, 'held2')]);
    throttle(locks);
    await readBackCame;
    // Past the leases' first end (10 s from their acquisition): only the late bulk holds them now.
    await sleep(1_500);
    const seen = await otherGets();
    await settle();
    expect((await first.lost).subtype).to.be.oneOf(['LockNotFound', 'DbError']);
    await second.lost;
    expect(seen).to.equal('acquired');
  });

  it('releases at once, ahead of throttled attempts, a lock its keeper gave up because its client\'s clock stepped back (the lease unknown, not ending)', async function () {
    this.timeout(60_000);
    const { slow, throttle, otherGets, settle } = await congested();
    let step = 0;
    const locks = writeLock({ collection: slow, locktimeout: 10_000, timeout: 30_000, changeStreams: false, clock: () => Date.now() + step });
    const { lost } = await holding(locks);
    throttle(locks);
    // The local clock steps back: the bounds of the server's clock are dropped, and the keeper
    // (due at half the lease) cannot rely on the lease any more. It is held on the server until
    // 10 s after its acquisition, unless released.
    step = -2_000;
    await sleep(6_500);
    const seen = await otherGets();
    await settle();
    expect((await lost).subtype).to.equal('LockNotFound');
    expect(seen).to.equal('acquired');
  });
});
