/**
 * What `monglock doctor` (and `doctor()` from code) finds: one finding per check, and the
 * report as an operator reads it.
 */
import { BSON } from 'mongodb';

/**
 * How a finding bears on monglock's guarantees: `fail`, one would not hold (the doctor exits 1);
 * `warn`, they hold but something costs or could not be checked; `ok`, as monglock assumes.
 */
export type DoctorStatus = 'ok' | 'warn' | 'fail';

/**
 * The checks, in the order they run: `server` (version and engine), `topology`, `write-concern`
 * (the default one), `shard-key`, `index` (the suggested partial index on `<field>.until`),
 * `clock-skew` (`$$NOW` against `$currentDate`, one finding per mongos measured through),
 * `majority-writes` (their latency) and `change-streams`.
 */
export type DoctorCheck = 'server' | 'topology' | 'write-concern' | 'shard-key' | 'index' | 'clock-skew' | 'majority-writes' | 'change-streams';

/** One thing the doctor checked. */
export interface DoctorFinding {
  readonly name: DoctorCheck;
  readonly status: DoctorStatus;
  /** What was read or measured, in a sentence with its numbers. */
  readonly summary: string;
  /** The measured values (durations and skews in ms), for machines. */
  readonly values: Readonly<Record<string, unknown>>;
  /** What to change, in a sentence (`nothing to change` when nothing needs to). */
  readonly advice: string;
}

/** What the doctor found for one collection. */
export interface DoctorReport {
  /** `db.collection`. */
  readonly namespace: string;
  /** False when a finding is `fail`: a guarantee monglock gives would not hold. */
  readonly ok: boolean;
  readonly findings: readonly DoctorFinding[];
}

/** A finding, its values made plain JSON (dates as ISO strings, BSON values as relaxed EJSON). */
export function finding(name: DoctorCheck, status: DoctorStatus, summary: string, values: Record<string, unknown>, advice = 'nothing to change'): DoctorFinding {
  return { name, status, summary, values: BSON.EJSON.serialize(values, { relaxed: true }) as Record<string, unknown>, advice };
}

/** The report as lines an operator reads: one finding per block, its status first, then what to change. */
export function renderReport(report: DoctorReport): string {
  const width = Math.max(...report.findings.map((item) => item.name.length));
  const lines = [`monglock doctor: ${report.namespace}`];
  for (const item of report.findings) {
    lines.push(`${item.status.toUpperCase().padEnd(4)}  ${item.name.padEnd(width)}  ${item.summary}`);
    if (item.advice !== 'nothing to change') lines.push(`${' '.repeat(width + 8)}→ ${item.advice}`);
  }
  const count = (status: DoctorStatus): number => report.findings.filter((item) => item.status === status).length;
  lines.push(`${report.ok ? 'ok' : 'FAILED'}: ${count('fail')} failing, ${count('warn')} warning(s), ${count('ok')} ok`);
  return lines.join('\n');
}
