/**
 * The doctor's checks that only read: what the server is, how it is deployed, its default write
 * concern, the collection's shard key and indexes. Each returns one finding.
 */
import type { Collection, Document } from 'mongodb';
import { helloOf, shardKeyOf, shardKeyFields } from '../../engine/deployment';
import { addressFromFilter } from '../../engine/address';
import { withDeadline } from '../../engine/store';
import { suggestedIndex, suggestedIndexCommand, untilIndexOf } from './lock-listing';
import { finding, type DoctorFinding } from './doctor-report';

/** What the doctor learns of the deployment first, and every check reads. */
export interface ServerFacts {
  readonly collection: Collection<Document>;
  readonly timeout: number;
  readonly hello: Document;
  readonly kind: 'standalone' | 'replica set' | 'sharded cluster';
  /** `mongod`, `mongos`, `FerretDB` or `mongo-java-server`: what answers, named by what it says of itself. */
  readonly engine: string;
  /** The MongoDB version it reports (`buildInfo.version`), undefined when refused. */
  readonly version: string | undefined;
  readonly ferretdbVersion: string | undefined;
}

/** A host of the seed list: reached on its own (`alone`, by the CLI with `directConnection=true`) or not (`error`), or only listed. */
export interface RouterReach {
  readonly via: string;
  readonly alone?: boolean;
  readonly error?: string;
}

const SUPPORTED = 'MongoDB 4.4 to 8.x';

/** The message of a failure, with its server code when there is one. */
export function reason(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return typeof code === 'number' ? `${message} (code ${code})` : message;
}

/** Runs an admin command within the doctor's timeout. */
export function adminCommand(collection: Collection<Document>, command: Document, timeout: number): Promise<Document> {
  return withDeadline(Object.keys(command)[0] ?? 'command', timeout, () => collection.db.admin().command(command));
}

/** `[major, minor]` of a version string, undefined when it does not read as one. */
export function versionOf(text: string | undefined): [number, number] | undefined {
  const match = /^(\d+)\.(\d+)/.exec(text ?? '');
  return match ? [Number(match[1]), Number(match[2])] : undefined;
}

/** Asks the server what it is (`hello`, else `isMaster`; `buildInfo`; `serverStatus`) and how it is deployed. */
export async function readDeployment(collection: Collection<Document>, timeout: number): Promise<ServerFacts> {
  const hello = await helloOf(collection, timeout);
  const routed = hello.msg === 'isdbgrid';
  const build = await adminCommand(collection, { buildInfo: 1 }, timeout).catch((): Document => ({}));
  const status = await adminCommand(collection, { serverStatus: 1 }, timeout).catch((): Document => ({}));
  const ferretdbVersion = typeof build.ferretdbVersion === 'string' ? build.ferretdbVersion : undefined;
  const engine = ferretdbVersion !== undefined ? 'FerretDB' : status.process === 'java' ? 'mongo-java-server' : routed ? 'mongos' : 'mongod';
  const kind = routed ? 'sharded cluster' : typeof hello.setName === 'string' ? 'replica set' : 'standalone';
  return { collection, timeout, hello, kind, engine, version: typeof build.version === 'string' ? build.version : undefined, ferretdbVersion };
}

/** `server`: the version against the supported range, and the engine named truly. */
export function serverFinding(deployment: ServerFacts): DoctorFinding {
  const { engine, version, ferretdbVersion } = deployment;
  const values = { engine, version: version ?? null, ...(ferretdbVersion !== undefined && { ferretdbVersion }), supported: '4.4-8.x' };
  const parsed = versionOf(version);
  if (!parsed) return finding('server', 'warn', `${engine}: buildInfo gave no version`, values, `check by hand that the server is ${SUPPORTED}`);
  const [major, minor] = parsed;
  if (major < 4 || (major === 4 && minor < 4)) {
    return finding('server', 'fail', `${engine} reports ${version}, older than ${SUPPORTED}`, values, 'upgrade to MongoDB 4.4 or newer: monglock reads the server clock with $$NOW in filters and relies on 4.4 semantics');
  }
  if (major > 8) {
    return finding('server', 'fail', `${engine} reports ${version}, newer than ${SUPPORTED}`, values, `run monglock's test suite against ${version} before relying on it (its guarantees are checked against ${SUPPORTED})`);
  }
  if (engine === 'mongo-java-server') {
    return finding('server', 'warn', `mongo-java-server (an in-memory test server) reporting MongoDB ${version}`, values, 'a test server: no replication, partial indexes ignored, no TTL expiry, no transactions; run production on mongod 4.4-8.x');
  }
  if (engine === 'FerretDB') {
    return finding('server', 'warn', `FerretDB ${ferretdbVersion} reporting MongoDB ${version}`, values, 'a compatible engine, not MongoDB: no change streams or transactions, and $$NOW in write filters needs a server setting; run monglock\'s suite against it before relying on it');
  }
  return finding('server', 'ok', `${engine} ${version}, within the supported ${SUPPORTED}`, values);
}

/** `topology`: standalone, replica set (members reached, primary) or sharded cluster (each mongos reached). */
export async function topologyFinding(deployment: ServerFacts, routers: readonly RouterReach[]): Promise<DoctorFinding> {
  const { hello, kind, engine } = deployment;
  if (kind === 'sharded cluster') {
    const reached = routers.filter((router) => router.alone === true).map((router) => router.via);
    const listed = routers.filter((router) => router.alone !== true && router.error === undefined).map((router) => router.via);
    const unreached = routers.filter((router) => router.error !== undefined).map((router) => `${router.via}: ${router.error}`);
    const values = { kind, mongos: reached, listed, unreached };
    const seen = [...(reached.length > 0 ? [`${reached.length} mongos reached on their own (${reached.join(', ')})`] : []), ...(listed.length > 0 ? [`through the client's seed list (${listed.join(', ')})`] : [])];
    const summary = `sharded cluster, ${seen.join(', ') || 'no mongos reached on its own'}${unreached.length > 0 ? `; ${unreached.length} not reached: ${unreached.join('; ')}` : ''}`;
    return unreached.length > 0 ? finding('topology', 'warn', summary, values, 'bring the unreached mongos back, or take them out of the seed list (a driver sends commands to every mongos it lists)') : finding('topology', 'ok', summary, values);
  }
  if (kind === 'standalone') {
    return finding('topology', 'ok', `standalone ${engine} (no replication: a majority write acts as w: 1, no failover)`, { kind, host: hello.me ?? null });
  }
  const listed = [...((hello.hosts ?? []) as string[]), ...((hello.passives ?? []) as string[])];
  const primary = typeof hello.primary === 'string' ? hello.primary : null;
  let members: Document[] | undefined;
  let refused: string | undefined;
  try {
    members = ((await adminCommand(deployment.collection, { replSetGetStatus: 1 }, deployment.timeout)).members ?? []) as Document[];
  } catch (error) {
    refused = reason(error);
  }
  const healthy = members?.filter((member) => member.health === 1).map((member) => String(member.name));
  const down = members?.filter((member) => member.health !== 1).map((member) => `${String(member.name)} (${String(member.stateStr ?? 'unreachable')})`) ?? [];
  const values = { kind, setName: hello.setName, primary, members: listed, reached: healthy ?? null, down, ...(refused !== undefined && { replSetGetStatus: refused }) };
  const reach = healthy ? `${healthy.length} of ${members!.length} members reached` : `members ${listed.join(', ')} (which are reached is unknown: replSetGetStatus refused: ${refused})`;
  const summary = `replica set ${String(hello.setName)}, primary ${primary ?? 'none'}, ${reach}`;
  if (primary === null) return finding('topology', 'fail', summary, values, 'no primary: no lock can be taken or released until one is elected; check the set (rs.status())');
  if (down.length > 0) return finding('topology', 'warn', `${summary}; down: ${down.join(', ')}`, values, 'bring the members that are down back: majority writes wait for a majority of the voting members');
  return finding('topology', 'ok', summary, values);
}

/** `write-concern`: the deployment's default, which the caller's own writes (not monglock's) inherit. */
export async function writeConcernFinding(deployment: ServerFacts): Promise<DoctorFinding> {
  let reply: Document;
  try {
    reply = await adminCommand(deployment.collection, { getDefaultRWConcern: 1 }, deployment.timeout);
  } catch (error) {
    return finding('write-concern', 'warn', `the default write concern could not be read: getDefaultRWConcern refused: ${reason(error)}`, { error: reason(error) }, 'check it by hand; pass a writeConcern of \'majority\' to your own guarded writes');
  }
  const w: unknown = (reply.defaultWriteConcern as Document | undefined)?.w ?? 1;
  const values = { w, source: reply.defaultWriteConcernSource ?? null };
  const members = ((deployment.hello.hosts ?? []) as string[]).length;
  const majority = w === 'majority' || deployment.kind === 'standalone' || (typeof w === 'number' && deployment.kind === 'replica set' && w >= Math.floor(members / 2) + 1);
  const summary = `the default write concern is w: ${JSON.stringify(w)}${values.source ? ` (${String(values.source)})` : ''}${deployment.kind === 'standalone' ? ' (one member: any w is all of them)' : ''}`;
  if (majority) return finding('write-concern', 'ok', summary, values);
  return finding('write-concern', 'warn', `${summary}, below majority`, values, "monglock sends w: 'majority' itself, but your own writes under a lock inherit this default: a failover can roll them back; setDefaultRWConcern({ defaultWriteConcern: { w: 'majority' } }) or pass writeConcern to them");
}

/** The shard key fields `filter` carries no equality on, as mongos extracts a shard key ({@link addressFromFilter}: top level, or a top-level `$and`). */
export function missingShardKeyFields(filter: Document, fields: readonly string[]): string[] {
  const named = addressFromFilter(filter, fields);
  return fields.filter((path) => !Object.hasOwn(named, path));
}

/** `shard-key`: the collection's shard key (`config.collections`), and whether `filter` names all of it. */
export async function shardKeyFinding(deployment: ServerFacts, filter: Document | undefined): Promise<DoctorFinding> {
  if (deployment.kind !== 'sharded cluster') return finding('shard-key', 'ok', `not a sharded cluster: no shard key to address`, { shardKey: null });
  let key: Document | undefined;
  try {
    key = await shardKeyOf(deployment.collection, deployment.timeout);
  } catch (error) {
    const summary = `config.collections could not be read (${reason(error)})${filter ? ': whether the filter names the shard key is unknown' : ''}`;
    return finding('shard-key', 'warn', summary, { shardKey: null, error: reason(error) }, "give the lock its shardKey option (the key as sh.shardCollection took it, e.g. { region: 1, _id: 1 }), or grant find on config.collections");
  }
  if (key === undefined) return finding('shard-key', 'ok', 'the collection is not sharded (it lives on its primary shard): no shard key to address', { shardKey: null });
  const fields = shardKeyFields(key);
  const shown = fields.join(', ');
  if (filter === undefined) {
    return finding('shard-key', 'ok', `shard key { ${shown} }`, { shardKey: key }, `give every lock filter an equality on ${shown} (--filter checks one)`);
  }
  const missing = missingShardKeyFields(filter, fields);
  const values = { shardKey: key, missing };
  if (missing.length === 0) return finding('shard-key', 'ok', `shard key { ${shown} }: the filter names all of it by equality`, values);
  const version = versionOf(deployment.version);
  const broadcast = version !== undefined && version[0] >= 7;
  const summary = `shard key { ${shown} }: the filter has no equality on ${missing.join(', ')}`;
  if (broadcast) return finding('shard-key', 'warn', `${summary}: mongos ${deployment.version} broadcasts such a findAndModify to every shard`, values, `add an equality on ${missing.join(', ')} to the lock's filter (each acquisition otherwise visits every shard)`);
  return finding('shard-key', 'fail', `${summary}: mongos 4.4-6.x refuses such a findAndModify (ShardKeyNotFound)`, values, `add an equality on ${missing.join(', ')} to the lock's filter`);
}

/** `index`: the indexes of the collection, and whether the suggested partial one on `<field>.until` is there. */
export async function indexFinding(deployment: ServerFacts, field: string): Promise<DoctorFinding> {
  const suggested = suggestedIndex(field);
  const create = `db.getCollection('${deployment.collection.collectionName}').${suggestedIndexCommand(field)}`;
  let indexes: Document[];
  try {
    indexes = await withDeadline('listIndexes', deployment.timeout, () => deployment.collection.indexes());
  } catch (error) {
    return finding('index', 'warn', `the indexes could not be listed: ${reason(error)}`, { suggested }, `create it (mongosh): ${create}`);
  }
  const listed = indexes.map((index) => ({ name: index.name, key: index.key, ...(index.partialFilterExpression !== undefined && { partialFilterExpression: index.partialFilterExpression }), ...(index.sparse === true && { sparse: true }) }));
  const values = { indexes: listed, suggested };
  const names = listed.map((index) => String(index.name)).join(', ');
  const ignored = deployment.engine === 'mongo-java-server' ? ' (mongo-java-server ignores partial filters: there it indexes every document)' : '';
  const found = untilIndexOf(indexes, field);
  if (found?.kind === 'partial') return finding('index', 'ok', `indexes ${names}; ${found.name} serves monglock status${ignored}`, values);
  if (found?.kind === 'full') {
    return finding('index', 'warn', `indexes ${names}; ${found.name} on ${field}.until indexes every document of the collection`, values, `replace it by a partial one, which indexes only the documents that ever held a lock (mongosh): db.getCollection('${deployment.collection.collectionName}').dropIndex('${found.name}'), then ${create}`);
  }
  return finding('index', 'warn', `indexes ${names}; none on ${field}.until: monglock status reads every document that ever held a lock`, values, `create it (mongosh): ${create}`);
}
