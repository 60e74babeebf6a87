/**
 * `doctor()`: whether a deployment and one collection meet what monglock assumes, measured.
 * `monglock doctor` (lib/integrations/cli/doctor-command.ts) runs the same checks from the
 * command line, through each mongos of the URI's seed list.
 */
import type { Collection, Document } from 'mongodb';
import { SHARDED_CLOCK_SKEW } from '../../engine/deployment';
import { knownKeys, refuseUnknownKeys } from '../../common/known-keys';
import { describe, expectCollection, expectFilter, expectMs, expectSafeName } from '../../common/validation';
import { indexFinding, readDeployment, serverFinding, shardKeyFinding, topologyFinding, writeConcernFinding, type RouterReach } from './doctor-checks';
import { changeStreamFinding, cleanScratch, clockSkewFinding, majorityWritesFinding, newScratch, type Route } from './doctor-clocks';
import type { DoctorFinding, DoctorReport } from './doctor-report';

export type { DoctorCheck, DoctorFinding, DoctorReport, DoctorStatus } from './doctor-report';

/** What the doctor checks the deployment against. */
export interface DoctorOptions {
  /**
   * The lock property of the documents (the locks' `field` option): the suggested index is on `<field>.until`.
   * @default 'lock'
   */
  readonly field?: string;
  /**
   * A lock filter to check against the collection's shard key: on a sharded collection, it must
   * name every shard key field by equality (mongos 4.4–6.x refuses a findAndModify without them).
   */
  readonly filter?: Readonly<Record<string, unknown>>;
  /**
   * The skew the locks assume between the deployment's clocks (their `maxClockSkew` option), in
   * ms: a measured skew beyond it is a failing finding.
   * @default 1000 (SHARDED_CLOCK_SKEW) on a sharded cluster, 0 elsewhere
   */
  readonly maxClockSkew?: number;
  /**
   * How long each command may take, in ms.
   * @default 10000
   */
  readonly timeout?: number;
}

/** The options once checked, with their defaults (the clock's skew still depends on the deployment). */
export interface ResolvedDoctorOptions {
  readonly field: string;
  readonly filter: Document | undefined;
  readonly maxClockSkew: number | undefined;
  readonly timeout: number;
}

const OPTIONS = knownKeys<DoctorOptions>()(['field', 'filter', 'maxClockSkew', 'timeout']);

/** Checks `options` before anything is sent: TypeError or RangeError naming the option (or a key it does not know). */
export function resolveDoctorOptions(options: DoctorOptions): ResolvedDoctorOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError(`Expected \`options\` to be an object, got ${describe(options)}`);
  refuseUnknownKeys('options', options, OPTIONS);
  return {
    field: options.field === undefined ? 'lock' : expectSafeName('options.field', options.field),
    filter: options.filter === undefined ? undefined : expectFilter('options.filter', options.filter),
    maxClockSkew: options.maxClockSkew === undefined ? undefined : expectMs('options.maxClockSkew', options.maxClockSkew, 0),
    timeout: options.timeout === undefined ? 10_000 : expectMs('options.timeout', options.timeout),
  };
}

/**
 * Checks the deployment behind `collection` against what monglock assumes, and measures it:
 * the server's version and engine, the topology, the default write concern, the collection's
 * shard key (and whether `options.filter` names it), the suggested partial index on
 * `<field>.until`, the skew between `$$NOW` (the routing mongos' clock) and `$currentDate` (the
 * shard primary's), the latency of majority writes and whether change streams deliver. The
 * measurements write to a scratch document in the scratch collection `monglock_doctor` of the
 * same database (deleted afterwards, and the collection dropped when empty), never to the
 * collection's documents. Run it at start-up and refuse to start on a failing finding.
 *
 * Through one client, commands go to whichever mongos the driver picks: `monglock doctor`
 * measures the skew through each mongos of the URI's seed list.
 *
 * @returns one finding per check (`ok`, `warn` or `fail`, with the measured values and what to
 *   change); `ok` is false when a finding is `fail`.
 * @throws TypeError or RangeError on bad options, before anything is sent; the driver's error
 *   when the server does not answer `hello`.
 * @example
 * ```ts
 * import { MongoClient } from 'mongodb';
 * import { doctor } from 'monglock';
 *
 * const client = await new MongoClient(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017').connect();
 * const orders = client.db('shop').collection('orders');
 * const report = await doctor(orders, { filter: { _id: 'order-1', region: 'eu' } });
 * for (const finding of report.findings) console.log(finding.status, finding.name, finding.summary, finding.advice);
 * if (!report.ok) throw new Error('monglock doctor: the deployment breaks a guarantee of the locks');
 * ```
 */
export async function doctor(collection: Collection<Document>, options: DoctorOptions = {}): Promise<DoctorReport> {
  expectCollection('collection', collection);
  return diagnose(collection, resolveDoctorOptions(options));
}

/** The hosts a client was given (its seed list, or the hosts an SRV record resolved to). */
export function clientHosts(collection: Collection<Document>): string[] {
  const hosts = (collection.db.client as { options?: { hosts?: readonly unknown[] } }).options?.hosts ?? [];
  return hosts.map(String);
}

/** The way to the deployment through the client's own seed list: every host listed, none reached on its own. */
export function throughClient(collection: Collection<Document>): { readonly reach: readonly RouterReach[]; readonly routes: readonly Route[] } {
  const hosts = clientHosts(collection);
  return { reach: hosts.map((via) => ({ via })), routes: [{ via: hosts.join(',') || 'the client', collection }] };
}

/**
 * Runs every check: `routers.routes` are the ways to the deployment the clock's skew is measured
 * through (one per mongos reached, for the CLI), `routers.reach` says which mongos were reached;
 * by default, the client's own seed list ({@link throughClient}).
 */
export async function diagnose(collection: Collection<Document>, options: ResolvedDoctorOptions, routers = throughClient(collection)): Promise<DoctorReport> {
  const deployment = await readDeployment(collection, options.timeout);
  const maxClockSkew = options.maxClockSkew ?? (deployment.kind === 'sharded cluster' ? SHARDED_CLOCK_SKEW : 0);
  const findings: DoctorFinding[] = [
    serverFinding(deployment),
    await topologyFinding(deployment, routers.reach),
    await writeConcernFinding(deployment),
    await shardKeyFinding(deployment, options.filter),
    await indexFinding(deployment, options.field),
  ];
  const scratch = newScratch();
  const [main] = throughClient(collection).routes as [Route];
  try {
    for (const route of routers.routes) findings.push(await clockSkewFinding(route, scratch, deployment, maxClockSkew));
    findings.push(await majorityWritesFinding(main, scratch, deployment));
    findings.push(await changeStreamFinding(main, scratch, deployment, options.field));
  } finally {
    await cleanScratch(main, scratch, options.timeout);
  }
  return { namespace: `${collection.dbName}.${collection.collectionName}`, ok: findings.every((item) => item.status !== 'fail'), findings };
}
