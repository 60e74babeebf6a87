/**
 * A command's `$$NOW` is fixed when it starts; one blocked on the server (behind a transaction, a
 * prepare conflict, a full ticket queue) lands later, judging by that stale clock. An extension or
 * a guarded write sent while its lock was live may so land after the lock expired and another
 * caller was admitted in its place. Where the new holder's write replaces the old entry (an
 * exclusive tag) or prunes it (another tag), the late command finds nothing; where it cannot (a
 * shared tag's own entries: a semaphore's permits, the readers an upgrade waited for), the
 * document's `judged` stamp says the entry is dead. Simulated: the old holder's command is held
 * back with `$$NOW` fixed when it was sent, and applied once the new holder is in.
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { multiLock, semaphore, type LockHandle } from '../../lib';
import { wrapWrites } from '../../stress/server-faults';
import { withNowFixed } from '../../stress/simulated-cluster';
import { realNow } from '../support/clock';
import { freshCollection } from '../support/fixture';
import { liveEntries } from '../support/lock-commands';

const LEASE = 1_500;
/** Readers share a document, a writer excludes them. */
const READ_WRITE = {
  locktimeouts: { read: LEASE, write: LEASE },
  lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } },
};

/** What a {@link BlockedCommand} saw happen, in order. */
const ACQUIRED = "the new holder's acquisition landed";
const APPLIED = 'the blocked command was applied';

/** A server on which the old holder's next command picked by `blockNext` is blocked, and lands right after the new holder's acquisition has. */
class BlockedCommand {
  #pick: ((args: readonly unknown[]) => boolean) | undefined;
  /** `blockNext` was called: the new holder's next acquisition is the one the picked command waits for. */
  #armed = false;
  /** That acquisition has landed: a command picked now is sent at once. */
  #acquired = false;
  #land = (): void => {};
  #landed = Promise.resolve();
  /** {@link ACQUIRED} and {@link APPLIED}, in the order they happened (since `blockNext`). */
  readonly events: string[] = [];
  /** The `$$NOW` the picked command was fixed at (the server's clock when it was sent). */
  fixedAt: number | undefined;

  constructor(private readonly raw: Collection<Document>) {}

  /** The old holder's collection: the picked command is sent with `$$NOW` fixed at once, and applied when the new holder's acquisition has landed. */
  get oldHolders(): Collection<Document> {
    return wrapWrites(this.raw, (_method, args, _n, send) => {
      if (!this.#pick?.(args)) return send(args);
      this.#pick = undefined;
      const fixedAt = realNow();
      this.fixedAt = fixedAt;
      const sent = args.map((arg) => withNowFixed(arg, new Date(fixedAt)));
      let landed = (): void => {};
      this.#landed = new Promise((resolve) => (landed = resolve));
      const blocked = this.#acquired ? Promise.resolve() : new Promise<void>((resolve) => (this.#land = resolve));
      return blocked
        .then(() => send(sent))
        .finally(() => {
          this.events.push(APPLIED);
          landed();
        });
    });
  }

  /** The new holder's collection: once its acquisition has landed, the blocked command lands, before the acquisition's reply. */
  get newHolders(): Collection<Document> {
    return wrapWrites(this.raw, async (_method, args, _n, send) => {
      const reply = await send(args);
      if (reply && ((args[1] ?? {}) as Document).$inc !== undefined) {
        if (this.#armed && !this.#acquired) {
          this.#acquired = true;
          this.events.push(ACQUIRED);
        }
        this.#land();
        await this.#landed;
      }
      return reply;
    });
  }

  blockNext(pick: (args: readonly unknown[]) => boolean): void {
    this.#pick = pick;
    this.#armed = true;
    this.#acquired = false;
  }

  /**
   * Sends `command` from the old holder near the end of its lease, blocked on the server until the new
   * holder's acquisition has landed; checks that it was sent while the old entry was live (its `$$NOW`
   * earlier than the entry's expiry) and applied after the new holder's acquisition.
   */
  async lateBehind<T>(held: LockHandle, command: () => Promise<T>, newHolder: () => Promise<LockHandle>): Promise<{ late: T | Error; next: LockHandle }> {
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, held.remaining() - 300)));
    const expiry = await this.#expiryOf(held);
    const late = command().catch((error: Error) => error);
    const next = await newHolder();
    const result = { late: await late, next };
    expect(this.fixedAt, `the blocked command's $$NOW (the old entry expires at ${expiry})`).to.be.a('number').and.lessThan(expiry);
    expect(this.events.slice(0, 2), 'the blocked command is applied after the new holder\'s acquisition landed').to.deep.equal([ACQUIRED, APPLIED]);
    return result;
  }

  /** The expiry of `held`'s entry in its document (the server's clock). */
  async #expiryOf(held: LockHandle): Promise<number> {
    const entry = (await liveEntries(this.raw, 'a', held.tag)).find((candidate) => candidate.id === held.id);
    expect(entry, `the old holder's entry is live in its document before its command is sent`).to.not.equal(undefined);
    return entry!.exp.getTime();
  }
}

/** True for an extension of a lock entry (it sets the entry's expiry). */
function isExtension(args: readonly unknown[]): boolean {
  const update = (args[1] ?? {}) as Document;
  return Object.keys((update.$set ?? {}) as Document).some((path) => path.endsWith('.$[mine].exp'));
}

/** True for an owner's nested hold of `tag` (it pushes an entry with an owner without moving the fence). */
const isNestedHold =
  (tag: string) =>
  (args: readonly unknown[]): boolean => {
    const update = (args[1] ?? {}) as Document;
    return update.$inc === undefined && Object.keys((update.$push ?? {}) as Document).some((path) => path.endsWith(`tags.${tag}`));
  };

describe('a command of a lock that lands after the lock expired and another caller was admitted', () => {
  it('a one-permit semaphore: the old holder\'s late extension does not renew the permit the new holder took', async function () {
    this.timeout(20_000);
    const raw = await freshCollection([{ _id: 'a' }]);
    const server = new BlockedCommand(raw);
    const old = await semaphore({ collection: server.oldHolders, limit: 1, locktimeout: LEASE }).acquire({ _id: 'a' });
    server.blockNext(isExtension);
    const waiter = semaphore({ collection: server.newHolders, limit: 1, locktimeout: LEASE });
    const { late, next } = await server.lateBehind(old, () => old.extend(), () => waiter.acquire({ _id: 'a' }, { wait: 10_000 }));
    const both = `old holder's extension: ${late instanceof Error ? late.message : 'resolved'}, remaining() ${old.remaining()} ms; new holder's remaining() ${next.remaining()} ms`;
    expect(await liveEntries(raw, 'a', 'permit'), both).to.have.length(1);
    expect(late, both).to.be.an('error');
    expect(old.remaining() > 0 && next.remaining() > 0, both).to.equal(false);
  });

  it('a one-permit semaphore: the old holder\'s late guarded write does not land under the new holder', async function () {
    this.timeout(20_000);
    const raw = await freshCollection([{ _id: 'a' }]);
    const server = new BlockedCommand(raw);
    const old = await semaphore({ collection: server.oldHolders, limit: 1, locktimeout: LEASE }).acquire({ _id: 'a' });
    server.blockNext((args) => ((args[1] ?? {}) as Document).$set?.writtenBy !== undefined);
    const waiter = semaphore({ collection: server.newHolders, limit: 1, locktimeout: LEASE });
    const write = (): Promise<number> => server.oldHolders.updateOne(old.guard(), { $set: { writtenBy: 'old' } }).then((result) => result.modifiedCount);
    const { late } = await server.lateBehind(old, write, () => waiter.acquire({ _id: 'a' }, { wait: 10_000 }));
    const doc = await raw.findOne({ _id: 'a' as never });
    expect(late, `the late write ${late instanceof Error ? late.message : `matched ${late}`}; the document says written by ${String(doc?.writtenBy)}`).to.equal(0);
  });

  it('an upgrade to write that waited for a reader: the reader\'s late extension does not renew its read lock beside the writer', async function () {
    this.timeout(20_000);
    const raw = await freshCollection([{ _id: 'a' }]);
    const server = new BlockedCommand(raw);
    const reader = await multiLock({ collection: server.oldHolders, ...READ_WRITE }).acquire({ _id: 'a' }, { tag: 'read' });
    const upgrader = await multiLock({ collection: server.newHolders, ...READ_WRITE }).acquire({ _id: 'a' }, { tag: 'read', locktimeout: 10_000 });
    server.blockNext(isExtension);
    const { late, next } = await server.lateBehind(reader, () => reader.extend(), () => upgrader.convert('write', { wait: 10_000 }));
    const both = `reader's extension: ${late instanceof Error ? late.message : 'resolved'}, remaining() ${reader.remaining()} ms; writer's remaining() ${next.remaining()} ms`;
    expect(next.tag, both).to.equal('write');
    expect(await liveEntries(raw, 'a', 'read'), both).to.have.length(0);
    expect(reader.remaining() > 0 && next.remaining() > 0, both).to.equal(false);
  });

  it('an upgrade to write that waited for an owner\'s read lock: the owner\'s late nested read hold does not land beside the writer', async function () {
    this.timeout(20_000);
    const raw = await freshCollection([{ _id: 'a' }]);
    const server = new BlockedCommand(raw);
    const owners = multiLock({ collection: server.oldHolders, ...READ_WRITE });
    const outer = await owners.acquire({ _id: 'a' }, { tag: 'read', owner: 'X' });
    const upgrader = await multiLock({ collection: server.newHolders, ...READ_WRITE }).acquire({ _id: 'a' }, { tag: 'read', locktimeout: 10_000 });
    server.blockNext(isNestedHold('read'));
    const { late, next } = await server.lateBehind(outer, () => owners.acquire({ _id: 'a' }, { tag: 'read', owner: 'X' }), () => upgrader.convert('write', { wait: 10_000 }));
    const both = `nested read hold: ${late instanceof Error ? late.message : `held, remaining() ${late.remaining()} ms`}; writer (${next.tag}) remaining() ${next.remaining()} ms; live read entries ${(await liveEntries(raw, 'a', 'read')).length}`;
    expect(next.tag, both).to.equal('write');
    expect(late instanceof Error || !(late.remaining() > 0 && next.remaining() > 0), both).to.equal(true);
    expect(await liveEntries(raw, 'a', 'read'), both).to.have.length(0);
  });
});
