import type { Document } from 'mongodb';
import type { Handle } from '../../locks/lock-handle';
import { describeLock } from '../../locks/lock-kind';
import { DEFAULT_MAX_HOLD } from '../../locks/lease-keeper';
import { describe, expectDocumentOption, expectMaxHold, expectMs, isPlainObject } from '../../common/validation';
import { WRITE_TAG } from '../../locks/write-lock';
import type { RouteLockOptions, RouteLockSettings } from './plugin';

/** How the plugin calls a route's lock (any schema, any promise library: a handle of this package is what it resolves). */
export interface CallableLock {
  acquire(filter: Document, params: object): PromiseLike<Handle>;
}

/** A route's validated configuration. */
export interface Resolved {
  readonly lock: CallableLock;
  readonly settings: RouteLockOptions;
}

const ROUTE_KEYS: ReadonlyArray<keyof RouteLockSettings | 'filter' | 'filters'> = ['lock', 'filter', 'filters', 'tag', 'wait', 'locktimeout', 'mode', 'document', 'maxHold'];

/** Validates a route's `plugins.monglock` (from onPreStart: a misconfigured route fails server.initialize()). */
export function resolveRoute(where: string, config: unknown): Resolved {
  if (!isPlainObject(config)) throw new TypeError(`Expected \`plugins.monglock\` of ${where} to be an object, got ${describe(config)}`);
  const unknown = Object.keys(config).find((key) => !(ROUTE_KEYS as string[]).includes(key));
  if (unknown === 'minHold') {
    throw new TypeError(`Unexpected option \`plugins.monglock.minHold\` of ${where}: a minimum hold is not offered on routes (a client's next request would be refused by its own previous one); take it with \`acquire(filter, { minHold })\` in the handler`);
  }
  if (unknown !== undefined) {
    throw new TypeError(`Unknown option \`plugins.monglock.${unknown}\` of ${where}: expected ${ROUTE_KEYS.join(', ')}`);
  }
  const settings = config as unknown as RouteLockOptions;
  if ((settings.filter === undefined) === (settings.filters === undefined)) {
    throw new TypeError(`Expected either \`plugins.monglock.filter\` (one document) or \`plugins.monglock.filters\` (several) of ${where}`);
  }
  const builder = settings.filter ?? settings.filters;
  if (typeof builder !== 'function') throw new TypeError(`Expected \`plugins.monglock.${settings.filter ? 'filter' : 'filters'}\` of ${where} to be a function (request) => ${settings.filter ? 'filter' : '[filter, …]'}`);
  if (settings.filters && settings.mode === 'checkout') throw new TypeError(`Expected no \`plugins.monglock.mode: 'checkout'\` with \`filters\` of ${where}: a group is held for one request`);
  if (settings.wait !== undefined && settings.wait !== Infinity) expectMs(`plugins.monglock.wait of ${where}`, settings.wait, 0); // Infinity: as the library takes it
  if (settings.locktimeout !== undefined) expectMs(`plugins.monglock.locktimeout of ${where}`, settings.locktimeout);
  expectMaxHold(`plugins.monglock.maxHold of ${where}`, settings.maxHold, DEFAULT_MAX_HOLD);
  const field = describeLock(settings.lock)?.field ?? 'lock';
  if (settings.document !== undefined) expectDocumentOption(`plugins.monglock.document of ${where}`, settings.document, field);
  if (settings.mode !== undefined && settings.mode !== 'hold' && settings.mode !== 'checkout') {
    throw new TypeError(`Expected \`plugins.monglock.mode\` of ${where} to be 'hold' or 'checkout'`);
  }
  const lock = lockFor(where, settings.lock);
  expectTag(where, lock, settings.tag);
  return { lock, settings };
}

/** The route's lock: an instance (or hapi's copy of one, which keeps its methods). */
function lockFor(where: string, given: unknown): CallableLock {
  if (isPlainObject(given) && typeof given.acquire === 'function') return given as unknown as CallableLock;
  throw new TypeError(
    `Expected \`plugins.monglock.lock\` of ${where} to be a writeLock, multiLock or semaphore instance, got ${describe(given)}: ` +
      'make the lock once with writeLock()/multiLock() and pass it (hapi deep-copies route options, which breaks a driver Collection inside lock options)',
  );
}

/** A multiLock route needs one of its lock's tags; a writeLock route none (or `write`). */
function expectTag(where: string, lock: CallableLock, tag: unknown): void {
  // Undefined for locks made elsewhere, and for instances hidden by hapi's copy of route options: their acquire decides.
  const description = describeLock(lock);
  if (!description) return;
  if (description.kind !== 'multiLock') {
    const only = description.kind === 'writeLock' ? WRITE_TAG : undefined; // a semaphore's acquire takes no tag
    if (tag !== undefined && tag !== only) {
      throw new TypeError(`Expected no \`plugins.monglock.tag\` of ${where}: its lock is a ${description.kind}${only ? ` (tag \`${only}\`)` : ''}, got ${describe(tag)}`);
    }
    return;
  }
  if (typeof tag !== 'string' || !description.tags.has(tag)) {
    throw new TypeError(`Expected \`plugins.monglock.tag\` of ${where} to be one of its multiLock's tags (${[...description.tags].join(', ')}), got ${describe(tag)}`);
  }
}
