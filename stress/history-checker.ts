/**
 * An independent checker of lock histories. It knows nothing of monglock: it reads an
 * append-only list of events that the clients recorded (intervals during which a holder ran code
 * it believed protected, each with its lock's fencing token, and how every call settled) and the
 * raw stored state read back from MongoDB at the end, and reports every violation of:
 *
 * 1. mutual exclusion: an exclusive holder's interval never overlaps another holder's interval on
 *    the same target (shared holders may overlap each other);
 * 2. fencing: of two holders of one target whose intervals follow each other, at least one of
 *    them exclusive, the later one has the larger token (also across purge and re-creation);
 * 3. no leak: once every call has settled and background releases had time to land, no target
 *    holds an unexpired lock (every holder has given up; a lock that a write applied late, after
 *    its caller was told it failed, wrote included);
 * 4. liveness: every call settled;
 * 5. limits: the holders of a semaphore's target (holds with `permits`) never hold more than its
 *    `limit` permits at once;
 * 6. guarded writes: each holder writes to its target through a filter that matches only while it
 *    holds the lock, logging `{ holder, fence, mode }` in the target itself; in that log, in the
 *    order the server applied the writes, no holder's write comes after a write of a holder with a
 *    larger token (a later holder), unless both holds are shared. This needs no clock at all: it is
 *    an independent proof of exclusion (and of fencing) in the server's own order;
 * 7. minimum hold: on a target, a holder that took its lock with `minHold` is followed by no other
 *    holder stamped less than `minHold` after it (by the acquisition stamps, server time), however
 *    early it released: the entry it leaves is never a hold;
 * 8. rate: the holds of a rate-limited target (with a `window`) never have more than `limit`
 *    permits stamped within any `window` ms;
 * 9. quarantine: no hold of a quarantined target starts after its mark landed and before the mark
 *    can have ended (its `until`, less the clocks' skew).
 *
 * All times are one machine's clock in ms (the test server runs on the same machine, so it is also
 * the server's clock).
 */

/** A span of time during which a holder ran code it believed the lock protected. */
export interface HoldEvent {
  readonly type: 'hold';
  readonly target: string;
  /** The lock's id: intervals of one holder may overlap each other. */
  readonly holder: string;
  readonly mode: 'exclusive' | 'shared';
  readonly fence: number;
  readonly start: number;
  readonly end: number;
  /** A semaphore's holder: the permits it held, and the target's limit. */
  readonly permits?: number;
  readonly limit?: number;
  /** Taken with minHold: its acquisition stamp (server ms), and the minimum hold or (a rate limit's permit) the window. */
  readonly stamp?: number;
  readonly minHold?: number;
  readonly window?: number;
}

/** How one call ended. */
export interface SettledEvent {
  readonly type: 'settled';
  readonly op: number;
  readonly kind: string;
  /** `ok`, an error's subtype or name, or `unsettled` when it did not settle in time. */
  readonly outcome: string;
  readonly at: number;
}

/** A quarantine mark that landed (its call resolved by `landedBy`), ending at `until` by the server's clock. */
export interface QuarantineEvent {
  readonly type: 'quarantine';
  readonly target: string;
  readonly landedBy: number;
  readonly until: number;
}

/** One recorded event. */
export type HistoryEvent = HoldEvent | SettledEvent | QuarantineEvent;

/** A lock entry as stored: its target, its tag, its id and when it expires (ms). */
export interface StoredEntry {
  readonly target: string;
  readonly tag: string;
  readonly id: string;
  readonly exp: number;
}

/** What a holder logged with one guarded write, in its target's log. */
export interface GuardedWrite {
  /** The holder, as in its hold events (with `fence`, it names one holder). */
  readonly holder: string;
  readonly fence: number;
  readonly mode: 'exclusive' | 'shared';
}

/** The stored state at the end. */
export interface FinalState {
  /** Unexpired lock entries left per target. */
  readonly liveEntries: readonly StoredEntry[];
  /** Each target's log of guarded writes, in the order the server applied them. */
  readonly guardedLogs?: ReadonlyArray<{ readonly target: string; readonly entries: readonly GuardedWrite[] }>;
}

/** One broken invariant, in words. */
export interface Violation {
  readonly rule: 'exclusion' | 'fencing' | 'leak' | 'liveness' | 'limit' | 'guarded' | 'minHold' | 'rate' | 'quarantine';
  readonly detail: string;
}

/** Checks a history; resolves every violation found (none: the history is correct). */
export function checkHistory(events: readonly HistoryEvent[], final: FinalState, skewMs = 0): Violation[] {
  const violations: Violation[] = [];
  const holds = events.filter((event): event is HoldEvent => event.type === 'hold');
  const byTarget = new Map<string, HoldEvent[]>();
  for (const hold of holds) byTarget.set(hold.target, [...(byTarget.get(hold.target) ?? []), hold]);

  for (const [target, list] of byTarget) {
    const sorted = [...list].sort((a, b) => a.start - b.start);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const a = sorted[i]!;
        const b = sorted[j]!;
        if (a.holder === b.holder) continue;
        if (a.mode === 'shared' && b.mode === 'shared') continue;
        if (b.start < a.end) {
          violations.push({
            rule: 'exclusion',
            detail: `${target}: ${a.mode} ${a.holder} (fence ${a.fence}) [${a.start.toFixed(1)}, ${a.end.toFixed(1)}] overlaps ${b.mode} ${b.holder} (fence ${b.fence}) from ${b.start.toFixed(1)} by ${(a.end - b.start).toFixed(1)} ms`,
          });
        } else if (b.fence <= a.fence) {
          violations.push({ rule: 'fencing', detail: `${target}: ${b.holder} (fence ${b.fence}) after ${a.holder} (fence ${a.fence})` });
        }
      }
    }
  }

  for (const [target, list] of byTarget) {
    const limited = list.filter((hold) => hold.permits !== undefined && hold.limit !== undefined);
    const points = limited.flatMap((hold) => [{ at: hold.start, delta: hold.permits! }, { at: hold.end, delta: -hold.permits! }]).sort((a, b) => a.at - b.at || a.delta - b.delta);
    let held = 0;
    for (const point of points) {
      held += point.delta;
      const limit = limited[0]!.limit!;
      if (held > limit) violations.push({ rule: 'limit', detail: `${target}: ${held} permits held at ${point.at.toFixed(1)}, limit ${limit}` });
    }
  }

  for (const [target, list] of byTarget) violations.push(...minHoldViolations(target, list), ...rateViolations(target, list));
  for (const mark of events.filter((event): event is QuarantineEvent => event.type === 'quarantine')) violations.push(...quarantineViolations(mark, byTarget.get(mark.target) ?? [], skewMs));

  for (const entry of final.liveEntries) {
    violations.push({ rule: 'leak', detail: `${entry.target}: ${entry.tag} lock ${entry.id} still held (expires ${new Date(entry.exp).toISOString()}) after every holder gave up` });
  }
  for (const log of final.guardedLogs ?? []) violations.push(...guardedWriteViolations(log.target, log.entries));
  for (const event of events) {
    if (event.type === 'settled' && event.outcome === 'unsettled') violations.push({ rule: 'liveness', detail: `call ${event.op} (${event.kind}) never settled` });
  }
  return violations;
}

/**
 * Rule 6 on one target's log: of two guarded writes of different holders (holder and fence), not
 * both shared, the one the server applied first has the smaller token. A write of a holder after
 * a later holder's write means both held the target at once by the server's own judgement.
 */
export function guardedWriteViolations(target: string, log: readonly GuardedWrite[]): Violation[] {
  const violations: Violation[] = [];
  const same = (a: GuardedWrite, b: GuardedWrite): boolean => a.holder === b.holder && a.fence === b.fence;
  for (let j = 1; j < log.length; j++) {
    const b = log[j]!;
    // The first earlier write (of another holder, not both shared) with a token at least b's: one violation per late write.
    const i = log.slice(0, j).findIndex((a) => !same(a, b) && !(a.mode === 'shared' && b.mode === 'shared') && a.fence >= b.fence);
    if (i < 0) continue;
    const a = log[i]!;
    violations.push({ rule: 'guarded', detail: `${target}: ${b.mode} ${b.holder} (fence ${b.fence}) wrote (log #${j}) after ${a.mode} ${a.holder} (fence ${a.fence}) had written (log #${i})` });
  }
  return violations;
}

/** Rule 7 on one target's holds: after a hold taken with `minHold`, the next holder's stamp is at least `minHold` later. */
export function minHoldViolations(target: string, holds: readonly HoldEvent[]): Violation[] {
  const stamped = holds.filter((hold) => hold.stamp !== undefined && hold.mode === 'exclusive').sort((a, b) => a.stamp! - b.stamp!);
  const violations: Violation[] = [];
  for (let i = 1; i < stamped.length; i++) {
    const [a, b] = [stamped[i - 1]!, stamped[i]!];
    if (a.holder !== b.holder && a.minHold !== undefined && b.stamp! - a.stamp! < a.minHold) {
      violations.push({ rule: 'minHold', detail: `${target}: ${b.holder} (fence ${b.fence}) stamped ${b.stamp! - a.stamp!} ms after ${a.holder} (fence ${a.fence}), whose minHold is ${a.minHold} ms` });
    }
  }
  return violations;
}

/** Rule 8 on one target's holds: no `window` ms hold more than `limit` permits by their stamps. */
export function rateViolations(target: string, holds: readonly HoldEvent[]): Violation[] {
  const rated = holds.filter((hold) => hold.stamp !== undefined && hold.window !== undefined && hold.limit !== undefined).sort((a, b) => a.stamp! - b.stamp!);
  const violations: Violation[] = [];
  for (let i = 0; i < rated.length; i++) {
    const first = rated[i]!;
    const within = rated.filter((hold) => hold.stamp! >= first.stamp! && hold.stamp! < first.stamp! + first.window!);
    const permits = within.reduce((sum, hold) => sum + (hold.permits ?? 1), 0);
    if (permits > first.limit!) violations.push({ rule: 'rate', detail: `${target}: ${permits} permits stamped within ${first.window} ms from ${first.stamp}, limit ${first.limit}` });
  }
  return violations;
}

/** Rule 9 for one mark: no hold of its target starts after the mark landed and before it can have ended (`until` less `skewMs`: a router's clock may be ahead). */
export function quarantineViolations(mark: QuarantineEvent, holds: readonly HoldEvent[], skewMs: number): Violation[] {
  return holds
    .filter((hold) => hold.start > mark.landedBy && hold.start < mark.until - skewMs)
    .map((hold) => ({ rule: 'quarantine' as const, detail: `${mark.target}: ${hold.holder} (fence ${hold.fence}) held from ${hold.start.toFixed(1)}, while quarantined (landed by ${mark.landedBy.toFixed(1)}, until ${mark.until.toFixed(1)})` }));
}
