import type { Document } from 'mongodb';
import { compareBson } from '../common/bson-order';
import { lockError, withDbErrors } from '../common/errors';
import { didYouMean, knownKeys } from '../common/known-keys';
import { readParams, type ResolvedCallOptions } from '../common/options';
import { describe, expectFilter, expectSafeName, namesOneDocument } from '../common/validation';
import type { DocumentLock } from '../locks/document-lock';
import { describeLock } from '../locks/lock-kind';
import type { MultiLock } from '../locks/multi-lock';
import type { Semaphore } from '../locks/semaphore';
import type { WriteLock } from '../locks/write-lock';
import { ofRequest } from './lock-group';

/** A lock of this package that a group can take: a writeLock, a multiLock or a semaphore (any schema, any promise library). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type GroupableLock = WriteLock<any, any> | MultiLock<any, any, any> | Semaphore<any, any>;

/** One document of a group: which lock, on which document, and how. */
export interface GroupRequest<L extends GroupableLock = GroupableLock> {
  /** The writeLock, multiLock or semaphore to take. */
  readonly lock: L;
  /** Selects exactly one document of the lock's collection (none or several is an error, before anything is locked). */
  readonly filter: Document;
  /** The tag, for a multiLock (required there; a writeLock's is `write`, a semaphore's `permit`). */
  readonly tag?: string;
  /** Reentrant: the owner of this hold (see the lock's `acquire`). */
  readonly owner?: string;
  /** For a semaphore (or a multiLock tag with a limit): the permits to take. @default 1 */
  readonly permits?: number;
}

const REQUEST = knownKeys<GroupRequest>()(['lock', 'filter', 'tag', 'owner', 'permits'], {
  wait: 'waiting is for the whole group: `acquireAll(requests, { wait })`',
  signal: 'the signal is for the whole group: `acquireAll(requests, { signal })`',
  locktimeout: 'the lease is for the whole group: `acquireAll(requests, { locktimeout })`',
  document: 'the document option is for the whole group: `acquireAll(requests, { document })`',
});

/** A request, validated: where it sits in `requests`, the lock behind it, and what to ask of it. */
export interface Member {
  /** Its place in `requests` (the handles come back in that order). */
  readonly index: number;
  readonly core: DocumentLock;
  /** The caller's filter. */
  readonly filter: Document;
  readonly tag: string;
  /** `owner` and `permits`, when given: passed to the member's acquisition. */
  readonly extra: Readonly<Record<string, unknown>>;
}

/** A member resolved to its one document: `_id`, and the filter that locks it (only while the caller's filter still selects it). */
export interface Located extends Member {
  readonly id: unknown;
  readonly target: Document;
}

/** Validates `requests` (an array of {@link GroupRequest}) before anything is read or written. */
export function readGroupRequests(requests: unknown): Member[] {
  if (!Array.isArray(requests)) throw new TypeError(`Expected \`requests\` to be an array of { lock, filter }, got ${describe(requests)}`);
  return requests.map((request: unknown, index) => {
    const name = `requests[${index}]`;
    const r = readParams(name, request, REQUEST, false);
    const description = describeLock(r.lock);
    if (!description) throw new TypeError(`Expected \`${name}.lock\` to be a writeLock, multiLock or semaphore of this package, got ${describe(r.lock)}`);
    const { core, kind, tags } = description;
    const [only] = tags;
    let tag: string;
    if (kind === 'multiLock') {
      if (r.tag === undefined) throw new TypeError(`Expected \`${name}.tag\` (one of ${[...tags].join(', ')}): a multiLock lock needs its tag`);
      tag = expectSafeName(`${name}.tag`, r.tag);
      if (!tags.has(tag)) throw new TypeError(`Unknown tag \`${tag}\` in \`${name}.tag\`.${didYouMean(tag, [...tags])} The multiLock declares ${[...tags].join(', ')}`);
    } else {
      if (r.tag !== undefined && r.tag !== only) throw new TypeError(`Expected no \`${name}.tag\`: a ${kind}'s tag is \`${only!}\``);
      tag = only!;
    }
    const extra = Object.fromEntries(Object.entries({ owner: r.owner, permits: r.permits }).filter(([, value]) => value !== undefined));
    return { index, core, filter: expectFilter(`${name}.filter`, r.filter), tag, extra };
  });
}

/**
 * Resolves each member to the one document its filter selects, reading only for filters that do
 * not name a plain `_id` (and the shard key's values, if any: one read each, all at once), and
 * sorts them in the canonical order every process computes alike: namespace, then `_id` in BSON
 * order, then lock field. A filter that selects no document is `RessourceNotFound` (404), one
 * that selects several, or two requests on one lock of one document, a TypeError: all before
 * anything is locked.
 */
export async function locateMembers(members: readonly Member[], call: (member: Member) => ResolvedCallOptions): Promise<Located[]> {
  const located = await Promise.all(
    members.map(async (member): Promise<Located> => {
      if (namesOneDocument(member.filter)) return { ...member, id: member.filter._id, target: member.filter };
      const options = call(member);
      const { boom } = options;
      const { engine } = member.core;
      const failed = (error: unknown): never => {
        throw ofRequest(error, member.index, member.core.namespace);
      };
      // `{ _id }` with shard key values names one document too: the shard key is known once the deployment is.
      await engine.deployment.ready(options)?.catch(failed);
      if (namesOneDocument(member.filter, engine.store.shardKey)) return { ...member, id: member.filter._id, target: member.filter };
      const ids = await withDbErrors(boom, () => engine.store.idsMatching(member.filter, options)).catch(failed);
      if (ids.length === 0) throw ofRequest(lockError('RessourceNotFound', boom, { detail: 'no document matches the filter' }), member.index, member.core.namespace);
      if (ids.length > 1) throw new TypeError(`Expected \`requests[${member.index}].filter\` to select one document of ${member.core.namespace}: it selects several (a group locks one document per request; name its \`_id\`)`);
      return { ...member, id: ids[0], target: { $and: [member.filter, { _id: ids[0] }] } };
    }),
  );
  located.sort(canonicalOrder);
  for (let i = 1; i < located.length; i++) {
    const [a, b] = [located[i - 1]!, located[i]!];
    if (canonicalOrder(a, b) === 0) {
      const [first, second] = a.index < b.index ? [a, b] : [b, a];
      throw new TypeError(`Expected each request to lock another document: \`requests[${first.index}]\` and \`requests[${second.index}]\` select the same document of ${a.core.namespace} with the same lock field`);
    }
  }
  return located;
}

/** The canonical order of a group: namespace, then `_id` in MongoDB's BSON order, then lock field. */
export function canonicalOrder(a: Located, b: Located): number {
  return compareText(a.core.namespace, b.core.namespace) || compareBson(a.id, b.id) || compareText(a.core.engine.field, b.core.engine.field);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
