import { distance } from 'fastest-levenshtein';

/** The keys an options or params object may have, with a hint for keys that belong elsewhere. */
export interface KnownKeys {
  readonly keys: ReadonlySet<string>;
  /** Why a key that is not accepted here is refused, when a plain "unknown" would mislead (`collection` per call, say). */
  readonly misplaced: Readonly<Record<string, string>>;
}

/**
 * The keys of `T`, listed once: `knownKeys<WriteLockAcquireParams>()(['timeout', …])` fails to
 * compile when a key of `T` is missing from the list or the list names one `T` does not have, so
 * the runtime check cannot drift from the public type.
 */
export function knownKeys<T>() {
  return <const K extends ReadonlyArray<keyof T & string>>(
    keys: K & ([Exclude<keyof T, K[number]>] extends [never] ? unknown : { missing: Exclude<keyof T, K[number]> }),
    misplaced: Readonly<Record<string, string>> = {},
  ): KnownKeys => ({ keys: new Set<string>(keys), misplaced });
}

/**
 * Throws a TypeError before anything is written when `object` (named `name` in the message) has a
 * key `known` does not list: a misspelled option must never be ignored, since ignoring `lok` or
 * `wiat` silently loosens a lock (a forced release, no waiting). The message names the key and the
 * known key nearest to it.
 */
export function refuseUnknownKeys(name: string, object: object, known: KnownKeys): void {
  for (const key of Object.keys(object)) {
    if (!known.keys.has(key)) throw new TypeError(unknownKeyMessage(name, key, known));
  }
}

function unknownKeyMessage(name: string, key: string, known: KnownKeys): string {
  const hint = Object.hasOwn(known.misplaced, key) ? known.misplaced[key] : undefined;
  if (hint !== undefined) return `Unexpected key \`${name}.${key}\`: ${hint}`;
  return `Unknown key \`${name}.${key}\`.${didYouMean(key, [...known.keys])} Known keys: ${[...known.keys].join(', ')}`;
}

/**
 * The candidate nearest to `key` (case ignored, then edit distance), when it is near enough to be
 * a misspelling of it (at most 2 edits, or a third of its length): `tag` is no misspelling of `w`.
 */
export function nearestKey(key: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = distance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined;
}

/** ` Did you mean \`x\`?` for the candidate nearest to `name` ({@link nearestKey}), or nothing. */
export function didYouMean(name: string, candidates: readonly string[]): string {
  const nearest = nearestKey(name, candidates);
  return nearest === undefined ? '' : ` Did you mean \`${nearest}\`?`;
}
