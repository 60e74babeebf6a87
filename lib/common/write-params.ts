import type { ClientSession, Document } from 'mongodb';
import type { ResolvedCallOptions } from './options';
import { describe, expectFilter, expectObject, expectUpdate, isPlainObject } from './validation';

/** A caller's final write, as a release (a commit) or an extension applies it. */
export interface FinalWrite {
  /** Update operators on the locked document. */
  readonly update: Document;
  /** What the document must also match (the array match of a positional `$`). */
  readonly match?: Document;
  /** The array filters of the update's `$[<identifier>]` paths. */
  readonly arrayFilters?: readonly Document[];
}

/** The array filter identifier monglock's own updates use (an extension's `$[mine]`). */
const OWN_IDENTIFIER = 'mine';

/**
 * `params.update`, with `params.match` and `params.arrayFilters`, validated before anything is
 * written: update operators that leave the lock's `field` alone, a filter, plain objects whose
 * identifiers are not monglock's own. Undefined without an update (`match` and `arrayFilters`
 * alone are refused: there is nothing for them to apply to).
 */
export function finalWriteOf(params: Record<string, unknown>, field: string): FinalWrite | undefined {
  const { update, match, arrayFilters } = params;
  if (update === undefined) {
    const stray = match !== undefined ? 'match' : arrayFilters !== undefined ? 'arrayFilters' : undefined;
    if (stray) throw new TypeError(`Expected \`params.${stray}\` only with \`params.update\`: it says how an update applies`);
    return undefined;
  }
  return {
    update: expectUpdate('params.update', update, field),
    ...(match !== undefined && { match: expectFilter('params.match', match) }),
    ...(arrayFilters !== undefined && { arrayFilters: expectArrayFilters('params.arrayFilters', arrayFilters) }),
  };
}

/** Throws unless `value` is an array of array filters (plain objects), none of them on monglock's own identifier. */
export function expectArrayFilters(name: string, value: unknown): Document[] {
  if (!Array.isArray(value) || value.length === 0) throw new TypeError(`Expected \`${name}\` to be a non-empty array of array filters, got ${describe(value)}`);
  return value.map((filter, i) => {
    const checked = expectObject(`${name}[${i}]`, filter);
    const own = Object.keys(checked).find((path) => path === OWN_IDENTIFIER || path.startsWith(`${OWN_IDENTIFIER}.`));
    if (own) throw new TypeError(`Expected \`${name}[${i}]\` not to use the identifier \`${OWN_IDENTIFIER}\`: monglock's extension uses it`);
    return checked;
  });
}

/** `<prefix>.session`, validated: a driver session (`client.startSession()`), or undefined. */
export function sessionOf(params: Record<string, unknown>, prefix = 'params'): ClientSession | undefined {
  const { session } = params;
  if (session === undefined) return undefined;
  if (!isPlainObject(session) || typeof (session as { inTransaction?: unknown }).inTransaction !== 'function' || typeof (session as { endSession?: unknown }).endSession !== 'function') {
    throw new TypeError(`Expected \`${prefix}.session\` to be a driver session (\`client.startSession()\`), got ${describe(session)}`);
  }
  return session as unknown as ClientSession;
}

/**
 * What a release or an extension writes besides the lock: the caller's final write
 * ({@link finalWriteOf}), and its call, in the caller's session when `params.session` gives one.
 */
export function finalCallOf(params: Record<string, unknown>, field: string, plain: ResolvedCallOptions): { write: FinalWrite | undefined; session: ClientSession | undefined; call: ResolvedCallOptions } {
  const write = finalWriteOf(params, field);
  const session = sessionOf(params);
  return { write, session, call: session ? { ...plain, session } : plain };
}

/** True when the call runs inside the caller's transaction. */
export function inTransaction(call: Pick<ResolvedCallOptions, 'session'>): boolean {
  return call.session?.inTransaction() === true;
}
