/** A lock held in this process: its tag and lease end (server ms). */
interface HeldLock {
  readonly tag: string;
  readonly expiresAt: number;
}

/**
 * The locks held in this process, by document key, then by lock id: whether a lock that blocks a
 * waiter is held here (its release here will wake it), and until when. A lease that ran out
 * without a release here stops counting (judged by `serverNow`, a lower bound of the server's clock).
 */
export class HeldLocks {
  private readonly byDocument = new Map<string, Map<string, HeldLock>>();

  constructor(private readonly serverNow: () => number) {}

  /** True while a lock of one of `tags` on document `key` is held here and its lease has not ended. */
  blocks(key: string, tags: ReadonlySet<string>): boolean {
    const locks = this.byDocument.get(key);
    if (!locks) return false;
    const now = this.serverNow();
    for (const [lockId, lock] of locks) {
      if (lock.expiresAt <= now) locks.delete(lockId); // ran out without a release here
      else if (tags.has(lock.tag)) return true;
    }
    if (locks.size === 0) this.byDocument.delete(key);
    return false;
  }

  /** When the leases of the locks of one of `tags` held here on document `key` end, as they were won (server ms; the last of them), if any is held. */
  until(key: string, tags: ReadonlySet<string>): number | undefined {
    let until: number | undefined;
    for (const lock of this.byDocument.get(key)?.values() ?? []) if (tags.has(lock.tag)) until = Math.max(until ?? 0, lock.expiresAt);
    return until;
  }

  /** Lock `lockId` of `tag` on document `key` was won here, until `expiresAt` (server ms). */
  add(key: string, lockId: string, tag: string, expiresAt: number): void {
    let locks = this.byDocument.get(key);
    if (!locks) this.byDocument.set(key, (locks = new Map()));
    locks.set(lockId, { tag, expiresAt });
  }

  /** Lock `lockId` on document `key` no longer counts (every lock there, without `lockId`). */
  remove(key: string, lockId?: string): void {
    const locks = this.byDocument.get(key);
    if (!locks) return;
    if (lockId === undefined) locks.clear();
    else locks.delete(lockId);
    if (locks.size === 0) this.byDocument.delete(key);
  }

  /** The key of the document lock `lockId` is held on, removing it; undefined when it is not held here. */
  take(lockId: string): string | undefined {
    for (const [key, locks] of this.byDocument) {
      if (!locks.has(lockId)) continue;
      this.remove(key, lockId);
      return key;
    }
    return undefined;
  }
}
