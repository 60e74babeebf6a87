import type { Document } from 'mongodb';
import { traced } from '../common/diagnostics';
import type { ResolvedCallOptions } from '../common/options';
import { finalCallOf, inTransaction } from '../common/write-params';
import type { Acquired } from '../engine/acquired';
import type { LockEngine } from '../engine/lock-engine';
import type { LockData } from '../protocol/lock-data';
import type { Proof } from '../protocol/proofs';
import type { ServerClock } from '../protocol/server-clock';
import type { TransactionWrites } from './transaction-writes';
import { extensionOf, type Extension, type KeptExtension } from './handle-owner';

/** What an extension needs from the lock it runs on (a {@link DocumentLock}). */
export interface ExtensionSite {
  readonly engine: LockEngine;
  readonly clock: ServerClock;
  readonly kindName: string;
  readonly transactionWrites: TransactionWrites;
}

/**
 * Extends `lock` in the document `target` addresses to `lease` ms from the server's now, with the
 * caller's final write (`params.update`, `match`, `arrayFilters`) and in its transaction
 * (`params.session`), traced on `monglock:extend`. In a transaction, the new lease counts only once
 * the transaction commits, which monglock cannot see: the lock it resolves keeps the lease it had;
 * and a `using()` keeping it releases it after that transaction.
 */
export async function extendLock(site: ExtensionSite, target: Document, lock: LockData, proof: Proof, lease: number, params: Record<string, unknown>, plain: ResolvedCallOptions): Promise<Acquired> {
  const { write, call } = finalCallOf(params, site.engine.field, plain);
  if (inTransaction(call)) site.transactionWrites.wrote(proof, call);
  const extended = await traced(
    'extend',
    () => ({ operation: 'extend', kind: site.kindName, namespace: site.engine.namespace, tag: lock.tag, lockId: lock.id || undefined, fence: lock.fence || undefined }),
    () => site.clock.local(),
    async (context) => {
      const done = await site.engine.extend(target, lock, proof, lease, call, undefined, write);
      if (context) context.expiresAt = done.lock.expiresAt;
      return done;
    },
  );
  return inTransaction(call) ? { ...extended, lock: { ...extended.lock, expiresAt: lock.expiresAt }, appliedAt: 0 } : extended;
}

/**
 * Extends `lock` as {@link extendLock} does; for a lease keeper (`kept`), a plain extension (no
 * update, no session, a finite lease) goes in a batch with the others due about then
 * (lib/engine/lease-scheduler.ts), and resolves undefined when it was not sent (withdrawn, or too late).
 */
export async function keepLock(site: ExtensionSite, target: Document, lock: LockData, lease: number, params: Record<string, unknown>, plain: ResolvedCallOptions, kept?: KeptExtension): Promise<Extension | undefined> {
  const single = async (): Promise<Extension> => extensionOf(await extendLock(site, target, lock, { id: lock.id }, lease, params, plain));
  const { write, session } = finalCallOf(params, site.engine.field, plain);
  if (!kept || write || session || !Number.isFinite(lease)) return single();
  return site.engine.leaseBatches.extend({ target, lock, lease, marginMs: kept.marginMs, signal: kept.signal, single }, plain);
}
