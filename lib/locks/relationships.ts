import type { TagRule } from '../protocol/lock-data';
import { conversionBlockedBy } from '../protocol/convert';
import { RESERVED_TAG_NAMES } from '../protocol/stored-format';
import { knownKeys, nearestKey } from '../common/known-keys';
import { readParams } from '../common/options';
import { describe, expectMs, expectObject, expectPermits, expectSafeName } from '../common/validation';

/**
 * How locks of one tag treat locks of other tags. Tags not named are concurrent (ignored). The
 * lists are plain strings, so that relationships written apart from the lock (without `as const`)
 * compile; a name the multiLock does not declare is refused when it is made.
 */
export interface TagRelationship {
  /** Acquiring this tag is refused (`CooperativeLock`) while an unexpired lock of any of these tags is held. */
  readonly cooperative?: readonly string[];
  /**
   * Acquiring this tag registers the lock even while these tags are held, and reports
   * `AssertiveLock` until they are gone (call `acquire(filter, { lock })` again).
   */
  readonly assertive?: readonly string[];
}

/** `{ [tag]: { cooperative?, assertive? } }`, as in monglock v2; `Tag`: the tags its keys may be. */
export type LockRelationships<Tag extends string = string> = { readonly [T in Tag]?: TagRelationship };

const RELATIONSHIP = knownKeys<TagRelationship>()(['cooperative', 'assertive']);

/** `{ [tag]: limit }`: tags that are counting semaphores (at most `limit` permits held at once). */
export type TagLimits<Tag extends string = string> = { readonly [T in NoInfer<Tag>]?: number };

/** The most a limit may be: a document holds an entry per lock, and stays well under 16 MB. */
export const MAX_LIMIT = 10_000;

/**
 * Validates tags, leases, relationships and limits, and returns one rule per tag. The keys of
 * `locktimeouts` declare the tags (as in monglock v2); without `locktimeouts`, the keys of
 * `lockRelationships` do (each with the default `locktimeout`). A relationship may only name
 * declared tags, as its key or in its lists, so that a misspelled name (`wirte`) is refused
 * instead of becoming a tag nobody holds, which would switch exclusion off. Refused with a TypeError/RangeError: unsafe tag names, tags without a lease, undeclared
 * tags in relationship lists, unknown keys, a tag both cooperative with and assertive over
 * another, and any cycle of assertive relationships (a tag over itself included), which can deadlock;
 * limits of undeclared tags, of tags cooperative with themselves (exclusive already), or that are
 * not whole numbers from 1 to {@link MAX_LIMIT}.
 */
export function resolveTagRules(
  locktimeouts: unknown,
  locktimeout: unknown,
  lockRelationships: unknown,
  tagLimits?: unknown,
): ReadonlyMap<string, TagRule> {
  const leases = locktimeouts === undefined ? {} : expectObject('options.locktimeouts', locktimeouts);
  const relationships = lockRelationships === undefined ? {} : expectObject('options.lockRelationships', lockRelationships);
  const defaultLease = locktimeout === undefined ? undefined : expectMs('options.locktimeout', locktimeout);

  const declared = new Set<string>();
  for (const tag of Object.keys(leases)) declared.add(expectSafeName(`options.locktimeouts key`, tag));
  for (const tag of Object.keys(relationships)) {
    expectSafeName(`options.lockRelationships key`, tag);
    // With `locktimeouts`, its keys are the tags (monglock v2): a relationship key outside them is a
    // misspelling (`wirte`), which would otherwise become a tag nobody holds and leave `write` unrelated.
    if (locktimeouts !== undefined && !declared.has(tag)) throw undeclared(tag, `\`options.lockRelationships\``, declared);
  }
  if (locktimeouts === undefined) for (const tag of Object.keys(relationships)) declared.add(tag);

  const lists = new Map<string, { cooperative: string[]; assertive: string[] }>();
  for (const [tag, value] of Object.entries(relationships)) {
    const relation = readParams(`options.lockRelationships.${tag}`, value, RELATIONSHIP, false);
    const cooperative = tagList(`options.lockRelationships.${tag}.cooperative`, relation.cooperative, declared);
    const assertive = tagList(`options.lockRelationships.${tag}.assertive`, relation.assertive, declared);
    const both = cooperative.find((other) => assertive.includes(other));
    if (both !== undefined) {
      throw new TypeError(`Tag \`${tag}\` cannot be both cooperative with and assertive over \`${both}\``);
    }
    lists.set(tag, { cooperative, assertive });
  }
  if (declared.size === 0) throw new TypeError('Expected `options.locktimeouts` or `options.lockRelationships` to declare at least one tag');
  const reserved = [...declared].find((tag) => RESERVED_TAG_NAMES.has(tag));
  if (reserved !== undefined) {
    throw new TypeError(
      `Tag \`${reserved}\` is reserved: the stored lock uses the keys ${[...RESERVED_TAG_NAMES].join(', ')} ` +
        '(and monglock v2 stored each tag at `lock.<tag>`, so such a tag collides with it): rename the tag',
    );
  }

  const rules = new Map<string, TagRule>();
  for (const tag of declared) {
    const lease = leases[tag] === undefined ? defaultLease : expectMs(`options.locktimeouts.${tag}`, leases[tag]);
    if (lease === undefined) {
      throw new RangeError(`Tag \`${tag}\` has no lease: set \`options.locktimeouts.${tag}\` or a default \`options.locktimeout\``);
    }
    const { cooperative = [], assertive = [] } = lists.get(tag) ?? {};
    rules.set(tag, { tag, lease, cooperative, assertive, exclusive: cooperative.includes(tag) });
  }
  for (const [tag, limit] of Object.entries(tagLimits === undefined ? {} : expectObject('options.limits', tagLimits))) {
    const rule = rules.get(tag);
    if (!rule) throw undeclared(tag, '`options.limits`', declared);
    if (rule.exclusive) throw new TypeError(`Tag \`${tag}\` is cooperative with itself (one holder at a time), so it cannot have a limit: drop one of the two`);
    rules.set(tag, { ...rule, limit: expectPermits(`options.limits.${tag}`, limit, MAX_LIMIT) });
  }
  rejectAssertiveCycles(rules);
  return rules;
}

/**
 * The rules of a lock whose holders may convert between tags (multiLock with two tags or more):
 * each tag yields to a pending conversion to any tag that waits for it (writer preference), so
 * its new locks are refused while one is pending.
 */
export function withUpgradePreference(rules: ReadonlyMap<string, TagRule>): ReadonlyMap<string, TagRule> {
  if (rules.size < 2) return rules;
  const preferred = new Map<string, TagRule>();
  for (const [tag, rule] of rules) {
    // A conversion to a tag with a limit also waits for permits of that tag to come free.
    const yields = [...rules.values()].filter((other) => conversionBlockedBy(other).includes(tag)).map((other) => other.tag);
    preferred.set(tag, yields.length > 0 ? { ...rule, yieldsToUpgradesOf: yields } : rule);
  }
  return preferred;
}

/** A relationship list: declared tags only (a name that is not a key of `locktimeouts` or `lockRelationships` is refused). */
function tagList(name: string, value: unknown, declared: ReadonlySet<string>): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new TypeError(`Expected \`${name}\` to be an array of tags, got ${describe(value)}`);
  return [
    ...new Set(
      value.map((tag, index) => {
        const safe = expectSafeName(`${name}[${index}]`, tag);
        if (!declared.has(safe)) throw undeclared(safe, `\`${name}\``, declared);
        return safe;
      }),
    ),
  ];
}

/** The error for a tag named in `where` that is not declared. */
function undeclared(tag: string, where: string, declared: ReadonlySet<string>): TypeError {
  const nearest = nearestKey(tag, [...declared]);
  return new TypeError(
    `Tag \`${tag}\` in ${where} is not declared${nearest === undefined ? '' : ` (did you mean \`${nearest}\`?)`}: ` +
      'the keys of `options.locktimeouts` declare the tags (without it, the keys of `options.lockRelationships` do); a relationship may only name declared tags',
  );
}

function rejectAssertiveCycles(rules: ReadonlyMap<string, TagRule>): void {
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (tag: string, path: string[]): void => {
    if (state.get(tag) === 'done') return;
    if (state.get(tag) === 'visiting') {
      const cycle = [...path.slice(path.indexOf(tag)), tag].join(' over ');
      throw new TypeError(`Assertive relationships form a cycle (${cycle}), which can deadlock`);
    }
    state.set(tag, 'visiting');
    for (const next of rules.get(tag)?.assertive ?? []) visit(next, [...path, tag]);
    state.set(tag, 'done');
  };
  for (const tag of rules.keys()) visit(tag, []);
}
