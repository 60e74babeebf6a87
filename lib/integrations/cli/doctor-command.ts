/**
 * `monglock doctor`: the doctor's checks from the command line. On a sharded cluster the clock's
 * skew is measured through each mongos of the URI's seed list, each reached on its own
 * (`directConnection=true`): a driver spreads commands over all of them.
 */
import { BSON, MongoClient, type Collection, type Document } from 'mongodb';
import { InvalidArgumentError, type Command } from 'commander';
import { collectionOptions } from './cli-options';
import { helloOf, isRouted } from '../../engine/deployment';
import { MAX_MS, expectFilter, isPlainObject } from '../../common/validation';
import { clientHosts, diagnose, throughClient, resolveDoctorOptions } from './doctor';
import { reason, type RouterReach } from './doctor-checks';
import type { Route } from './doctor-clocks';
import { renderReport, type DoctorReport } from './doctor-report';

/** The command line's options. */
export interface DoctorTarget {
  readonly uri: string;
  readonly db: string;
  readonly collection: string;
  readonly field: string;
  readonly filter?: Document;
  readonly maxClockSkew?: number;
  readonly json?: boolean;
}

/** Opens the namespace (an error when it does not exist), runs `body`, closes the client: the CLI's `withCollection`. */
export type WithCollection = <T>(target: DoctorTarget, body: (collection: Collection<Document>) => Promise<T>) => Promise<T>;

/** How long reaching one mongos on its own may take, in ms. */
const REACH_TIMEOUT_MS = 5_000;

/** Sets up `command` (created by the root program, so that it inherits its exit handling) as `doctor`. */
export function doctorCommand(command: Command, withCollection: WithCollection): Command {
  return collectionOptions(command.description('check the deployment against what monglock assumes, with measured numbers (exit 1 on a failing finding)'))
    .option('--filter <ejson>', 'a lock filter to check against the shard key (JSON/EJSON)', filterOf)
    .option('--max-clock-skew <ms>', "the locks' maxClockSkew (ms; default 1000 on a sharded cluster, 0 elsewhere)", skewOf)
    .option('--json', 'JSON instead of lines')
    .action((target: DoctorTarget) => runDoctor(target, withCollection));
}

async function runDoctor(target: DoctorTarget, withCollection: WithCollection): Promise<void> {
  const options = resolveDoctorOptions({ field: target.field, filter: target.filter, maxClockSkew: target.maxClockSkew });
  const report: DoctorReport = await withCollection(target, async (collection) => {
    const mongos = (await isRouted(collection, options.timeout)) ? await reachMongos(target, clientHosts(collection)) : undefined;
    try {
      if (!mongos || mongos.routes.length === 0) return await diagnose(collection, options, mongos && { reach: mongos.reach, routes: throughClient(collection).routes });
      return await diagnose(collection, options, mongos);
    } finally {
      await Promise.all(mongos?.clients.map((each) => each.close().catch(() => undefined)) ?? []);
    }
  });
  console.log(target.json ? JSON.stringify(report, null, 2) : renderReport(report));
  if (!report.ok) process.exitCode = 1;
}

/** Each host of the seed list reached on its own; those that answer as a mongos are routes to measure through (their clients to close). */
export async function reachMongos(target: DoctorTarget, hosts: readonly string[]): Promise<{ reach: RouterReach[]; routes: Route[]; clients: MongoClient[] }> {
  const found = { reach: [] as RouterReach[], routes: [] as Route[], clients: [] as MongoClient[] };
  if (!target.uri.startsWith('mongodb://')) {
    // mongodb+srv:// takes TLS and options from DNS: measured through the client's own choice of mongos only (listed, not reached alone).
    found.reach.push(...hosts.map((via) => ({ via })));
    return found;
  }
  for (const host of hosts) {
    const client = new MongoClient(uriForHost(target.uri, host), { directConnection: true, serverSelectionTimeoutMS: REACH_TIMEOUT_MS, readPreference: 'primary' });
    try {
      await client.connect();
      const collection = client.db(target.db).collection(target.collection);
      if ((await helloOf(collection, REACH_TIMEOUT_MS)).msg !== 'isdbgrid') throw new Error('answers, but is not a mongos');
      found.routes.push({ via: host, collection });
      found.reach.push({ via: host, alone: true });
      found.clients.push(client);
    } catch (error) {
      found.reach.push({ via: host, error: reason(error) });
      await client.close().catch(() => undefined);
    }
  }
  return found;
}

/** `uri` (`mongodb://[user:pass@]h1,h2/db?options`) with `host` alone in place of its host list. */
export function uriForHost(uri: string, host: string): string {
  return uri.replace(/^(mongodb:\/\/(?:[^@/?]*@)?)[^/?]*/, (_, prefix: string) => `${prefix}${host}`);
}

/** `--filter`: a filter object in JSON/EJSON (`{"_id": 1, "region": "eu"}`). */
function filterOf(text: string): Document {
  let parsed: unknown;
  try {
    parsed = BSON.EJSON.parse(text, { relaxed: true });
  } catch (error) {
    throw new InvalidArgumentError(`expected a filter in JSON/EJSON, such as {"_id": 1, "region": "eu"} (${reason(error)})`);
  }
  if (!isPlainObject(parsed) || Object.getPrototypeOf(parsed) !== Object.prototype) throw new InvalidArgumentError('expected a filter object, such as {"_id": 1, "region": "eu"}');
  try {
    return expectFilter('--filter', parsed);
  } catch (error) {
    throw new InvalidArgumentError(reason(error));
  }
}

/** `--max-clock-skew`: a whole number of ms, 0 or more. */
function skewOf(value: string): number {
  const ms = Number(value);
  if (!/^\d+$/.test(value) || ms > MAX_MS) throw new InvalidArgumentError(`expected a whole number of ms, from 0 to ${MAX_MS}`);
  return ms;
}
