import { SEARCH_COST_DEFAULTS } from '../../search/cost-limits.js';
import { DEFAULT_MAX_ACCURATE_TOTAL } from '../search/search-total.js';
import { DEFAULT_MAX_TERMINOLOGY_CODES } from '../search/resolve-terminology.js';

/*
 * The search limits a CapabilityStatement states. R4 has no element for limits: they go in
 * `rest.documentation` (markdown, "information about the system's restful capabilities") and in
 * the documentation of the result parameters they bound (`rest.searchParam.documentation`).
 */

/**
 * The search limits a CapabilityStatement states (`CapabilityStatementInput.searchLimits`):
 * `fhirRouter`'s options of the same names (`defaultCount`, `maxCount`, and its `searchLimits`).
 */
export interface CapabilitySearchLimits {
  /** Page size without `_count`. @default 20 */
  defaultCount?: number;
  /** Largest page size. @default 1000 */
  maxCount?: number;
  /** Most matches an exact total counts; `Infinity`: no bound. @default 100000 */
  maxAccurateTotal?: number;
  /** Most `_sort` keys. @default 5 */
  maxSortKeys?: number;
  /** Most search parameters in one search. @default 30 */
  maxFilters?: number;
  /** Most `_has` nested in one another. @default 2 */
  maxHasDepth?: number;
  /** Largest `_offset`. @default 10000 */
  maxOffset?: number;
  /** Most resources `_include` / `_revinclude` add to a page. @default 1000 */
  maxIncluded?: number;
  /** Most levels `:iterate` follows. @default 3 */
  maxIncludeDepth?: number;
  /** Most codes a token `:in`, `:not-in`, `:below` or `:above` stands for. @default 10000 */
  maxTerminologyCodes?: number;
}

/** Every limit of {@link CapabilitySearchLimits}, defaults filled in. */
export type StatedLimits = Required<CapabilitySearchLimits>;

const DEFAULT_LIMITS: StatedLimits = {
  defaultCount: 20,
  maxCount: 1000,
  maxAccurateTotal: DEFAULT_MAX_ACCURATE_TOTAL,
  ...SEARCH_COST_DEFAULTS,
  maxIncluded: 1000,
  maxIncludeDepth: 3,
  maxTerminologyCodes: DEFAULT_MAX_TERMINOLOGY_CODES,
};

/** `limits` with the router's defaults for what it leaves out. */
export function statedLimits(limits: CapabilitySearchLimits = {}): StatedLimits {
  const given = Object.entries(limits).filter(([, value]) => value !== undefined);
  return { ...DEFAULT_LIMITS, ...(Object.fromEntries(given) as CapabilitySearchLimits) };
}

/** A count for people: `100,000`; `Infinity` as "no bound". */
export function shown(n: number): string {
  return n === Infinity ? 'no bound' : n.toLocaleString('en-US');
}

/** `rest.documentation`: the search limits, in Markdown. */
export function limitsDocumentation(limits: StatedLimits): string {
  const accurate =
    limits.maxAccurateTotal === Infinity
      ? 'is counted whatever the number of matches'
      : `is counted up to ${shown(limits.maxAccurateTotal)} matches: past that the search answers 400 \`too-costly\` (\`_total=estimate\` is never refused)`;
  return [
    'Search limits:',
    '',
    `- \`_count\`: ${shown(limits.defaultCount)} when absent, at most ${shown(limits.maxCount)} (a larger one is lowered).`,
    '- `total`: a searchset has none unless asked (`_total=accurate` or `estimate`; `_summary=count` and `_count=0` ask for an exact one).',
    `- An exact total ${accurate}.`,
    `- At most ${shown(limits.maxSortKeys)} \`_sort\` keys, ${shown(limits.maxFilters)} search parameters, \`_has\` nested ${shown(limits.maxHasDepth)} deep, an \`_offset\` of ${shown(limits.maxOffset)} (else 400 \`too-costly\`; \`next\` links page further).`,
    `- A token's \`:in\` / \`:not-in\` (a value set) and \`:below\` / \`:above\` (a code of a hierarchical code system) stand for at most ${shown(limits.maxTerminologyCodes)} codes (else 400 \`too-costly\`).`,
    `- \`_include\` / \`_revinclude\`: at most ${shown(limits.maxIncluded)} resources a page, \`:iterate\` ${shown(limits.maxIncludeDepth)} levels (a \`too-costly\` warning beyond).`,
  ].join('\n');
}

/**
 * The result parameters every type takes (`rest.searchParam`), documented with the bounds they are
 * held to: `searchParam.documentation` says them where a client looks.
 */
export function resultParameters(limits: StatedLimits): Record<string, string>[] {
  const includes = `${shown(limits.maxIncludeDepth)} levels, at most ${shown(limits.maxIncluded)} a page`;
  return [
    {
      name: '_count',
      type: 'number',
      documentation: `Page size: ${shown(limits.defaultCount)} when absent, at most ${shown(limits.maxCount)}. A search takes at most ${shown(limits.maxFilters)} parameters.`,
    },
    {
      name: '_offset',
      type: 'number',
      documentation: `Number of matches to skip, at most ${shown(limits.maxOffset)} (next links page further).`,
    },
    {
      name: '_sort',
      type: 'string',
      documentation: `Comma-separated search parameters of the type (or _id, _lastUpdated), - for descending; at most ${shown(limits.maxSortKeys)} keys.`,
    },
    { name: '_summary', type: 'token', documentation: 'true, text, data, count or false.' },
    { name: '_elements', type: 'string', documentation: 'Top-level elements to return (SUBSETTED).' },
    {
      name: '_total',
      type: 'token',
      documentation: `none (the default, but for _summary=count and _count=0), estimate or accurate (at most ${shown(limits.maxAccurateTotal)} matches, else 400 too-costly).`,
    },
    {
      name: '_include',
      type: 'special',
      documentation: `Type:parameter[:target], * and :iterate (${includes}).`,
    },
    {
      name: '_revinclude',
      type: 'special',
      documentation: `Type:parameter[:target] and :iterate (${includes}).`,
    },
    {
      name: '_has',
      type: 'special',
      documentation: `Reverse chaining: _has:Type:reference:parameter=value, nested at most ${shown(limits.maxHasDepth)} deep.`,
    },
  ];
}
