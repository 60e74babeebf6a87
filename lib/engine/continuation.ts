import type { Document } from 'mongodb';
import type { ResolvedCallOptions } from '../common/options';
import { continueOperation } from '../protocol/continue';
import type { LockData } from '../protocol/lock-data';
import { withDocument, type Acquired, type AssertivePending } from './acquired';
import type { LockEngine } from './lock-engine';
import { explainLostLock } from './refusals';
import { quarantinedVerdict } from './quarantined';

/**
 * Continues the assertive registration `lock` ({@link continueOperation}) in the document `target`
 * addresses: resolves the lock once no tag it asserts over is live, or an `AssertivePending` while
 * one is; rejects with `LockNotFound` (`LockWasReacquired` when `reportsReacquired`) once it was lost.
 */
export function continueRegistration(
  engine: LockEngine,
  reportsReacquired: boolean,
  target: Document,
  lock: LockData,
  call: ResolvedCallOptions,
  document?: Document | true,
): Promise<Acquired | AssertivePending> {
  const { paths, store } = engine;
  const rule = engine.rule(lock.tag);
  return engine.stamped(call, {
    target,
    lease: rule.lease,
    write: async (stamp, tolerance) => {
      const operation = continueOperation({ paths, tags: engine.tags, target, tag: lock.tag, id: lock.id, at: new Date(stamp), tolerance });
      const reply = await store.apply(operation, call, call.w, document);
      if (!reply.value) return undefined;
      engine.observeWrite(reply.value, reply);
      await engine.deployment.refuseSkewed(call);
      const stored = paths.read(reply.value);
      const own = stored.tags?.[lock.tag]?.find((entry) => entry.id === lock.id);
      const data: LockData = { ...lock, expiresAt: own?.exp.getTime() ?? lock.expiresAt };
      return withDocument(engine.assertiveOutcome(data, engine.deployment.addressOf(reply.value), stored, stamp), reply.value, paths.field, document, store.shardKey);
    },
    // A live quarantine mark refuses the continuation (Quarantined, final) before anything else is said of the lock.
    explain: (seen, stamp, tolerance) =>
      (seen.value ? quarantinedVerdict(paths.read(seen.value), seen.serverNow?.getTime() ?? stamp, call.boom, seen.value._id) : undefined) ??
      explainLostLock({ paths, rule, reportsReacquired, boom: call.boom }, seen, lock, { id: lock.id }, stamp, tolerance, rule.lease),
  });
}
