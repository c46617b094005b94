import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSearch, type SearchReads } from '../../src/fhir/search/search-query.js';
import type { FhirResource, Storage, StoredResource } from '../../src/storage/types.js';
import type { SystemCode } from '../../src/terminology/terminology-types.js';
import { forEachStore } from '../helpers/each-store.js';
import { fakeTerminology } from '../helpers/fake-terminology.js';
import { allReads } from '../helpers/search-reads.js';
import { loadCorpus } from '../helpers/search-differential.js';

/*
 * Differential test of the token modifiers `:in`, `:not-in`, `:below`, `:above` on every store
 * against an evaluation written here: value sets and a code hierarchy made of explicit code lists
 * drawn from the corpus (test/helpers/search-differential.ts), and membership checked by walking
 * each resource's elements by hand (no search module, no store). Asked as the FHIR router asks
 * (`parseSearch` resolves the modifiers through the terminology, the store answers the rest), alone,
 * in chains and in `_has`, with value sets short and long (thousands of codes).
 */

const PROJECT = 'p';
type Code = readonly [system: string | undefined, code: string];

/** Each searched element, read by hand: its codings, or for a `code` element its code alone. */
const READERS: Record<string, (r: FhirResource) => Code[]> = {
  'Observation.code': (r) => codings(r.code),
  'Observation.status': (r) => (typeof r.status === 'string' ? [[undefined, r.status]] : []),
  'Patient.gender': (r) => (typeof r.gender === 'string' ? [[undefined, r.gender]] : []),
  'Condition.code': (r) => codings(r.code),
  'Encounter.type': (r) => (Array.isArray(r.type) ? r.type.flatMap((t: unknown) => codings(t)) : []),
};
/** The search parameter reading each element. */
const PARAMETER: Record<string, string> = {
  'Observation.code': 'code',
  'Observation.status': 'status',
  'Patient.gender': 'gender',
  'Condition.code': 'code',
  'Encounter.type': 'type',
};

function codings(concept: unknown): Code[] {
  const list = (concept as { coding?: { system?: unknown; code?: unknown }[] } | undefined)?.coding ?? [];
  return list.flatMap((c) =>
    typeof c.code === 'string'
      ? [[typeof c.system === 'string' ? c.system : undefined, c.code] as const]
      : [],
  );
}

/** Membership by hand: a coding of the set, or (a `code` element, no system) a code of it. */
function member(codes: Code[], set: readonly SystemCode[]): boolean {
  return codes.some(([system, code]) =>
    set.some((s) => s.code === code && (system === undefined || s.system === system)),
  );
}

interface Fixture {
  valueSets: Record<string, SystemCode[]>;
  /** LOINC codes of the corpus as a tree: each code's parent (the first has none). */
  parents: Record<string, string[]>;
}

/** Value sets from the corpus's own codes (every other one, and that plus 3,000 unused) and a tree. */
function fixture(corpus: Map<string, StoredResource[]>): Fixture {
  const valueSets: Record<string, SystemCode[]> = {};
  for (const [element, read] of Object.entries(READERS)) {
    const type = element.split('.')[0]!;
    const seen = new Map<string, SystemCode>();
    for (const r of corpus.get(type) ?? []) {
      for (const [system, code] of read(r)) {
        const s = system ?? `urn:implied:${element}`;
        seen.set(`${s}|${code}`, { system: s, code });
      }
    }
    const half = [...seen.values()]
      .sort((a, b) => a.code.localeCompare(b.code))
      .filter((_, i) => i % 2 === 0);
    valueSets[`urn:diff:${element}`] = half;
    valueSets[`urn:diff:${element}:large`] = [
      ...half,
      ...Array.from({ length: 3000 }, (_, i) => ({ system: 'urn:unused', code: `u${i}` })),
    ];
  }
  const loinc = [
    ...new Set(
      (corpus.get('Observation') ?? []).flatMap((r) =>
        codings(r.code).flatMap(([s, c]) => (s === 'http://loinc.org' ? [c] : [])),
      ),
    ),
  ].sort();
  const parents: Record<string, string[]> = {};
  loinc.forEach((code, i) => {
    parents[code] = i === 0 ? [] : [loinc[Math.floor((i - 1) / 2)]!];
  });
  return { valueSets, parents };
}

/** `code` and the codes below it in `parents`, walked here. */
function below(parents: Record<string, string[]>, code: string): Set<string> {
  const out = new Set([code]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [child, ps] of Object.entries(parents)) {
      if (out.has(child) || !ps.some((p) => out.has(p))) continue;
      out.add(child);
      grew = true;
    }
  }
  return out;
}

/** `code` and the codes above it in `parents`. */
function above(parents: Record<string, string[]>, code: string): Set<string> {
  const out = new Set<string>();
  for (let c: string | undefined = code; c !== undefined; c = parents[c]?.[0]) out.add(c);
  return out;
}

/** A query, and the ids the evaluation here expects of it. */
type Case = [type: string, query: string, expected: string[]];

function cases(corpus: Map<string, StoredResource[]>, fx: Fixture): Case[] {
  const out: Case[] = [];
  const ids = (type: string, test: (r: StoredResource) => boolean) =>
    (corpus.get(type) ?? [])
      .filter(test)
      .map((r) => r.id)
      .sort();
  for (const [element, read] of Object.entries(READERS)) {
    const type = element.split('.')[0]!;
    const param = PARAMETER[element]!;
    for (const url of [`urn:diff:${element}`, `urn:diff:${element}:large`]) {
      const set = fx.valueSets[url]!;
      out.push([type, `${param}:in=${url}`, ids(type, (r) => member(read(r), set))]);
      out.push([type, `${param}:not-in=${url}`, ids(type, (r) => !member(read(r), set))]);
    }
  }
  const loinc = Object.keys(fx.parents).sort();
  for (const code of [loinc[0], loinc[1], loinc[Math.floor(loinc.length / 2)], loinc.at(-1)]) {
    if (code === undefined) continue;
    const codes = (set: Set<string>) => [...set].map((c) => ({ system: 'http://loinc.org', code: c }));
    const read = READERS['Observation.code']!;
    const down = codes(below(fx.parents, code));
    const up = codes(above(fx.parents, code));
    out.push([
      'Observation',
      `code:below=http://loinc.org|${code}`,
      ids('Observation', (r) => member(read(r), down)),
    ]);
    out.push([
      'Observation',
      `code:above=http://loinc.org|${code}`,
      ids('Observation', (r) => member(read(r), up)),
    ]);
  }
  // A chain and a `_has`, evaluated by following the references here.
  const genders = fx.valueSets['urn:diff:Patient.gender']!;
  const patientsIn = new Set(ids('Patient', (r) => member(READERS['Patient.gender']!(r), genders)));
  const subjectOf = (r: FhirResource) => (r.subject as { reference?: string } | undefined)?.reference;
  out.push([
    'Observation',
    'subject:Patient.gender:in=urn:diff:Patient.gender',
    ids('Observation', (r) => patientsIn.has(subjectOf(r)?.replace(/^Patient\//, '') ?? '')),
  ]);
  const codesIn = fx.valueSets['urn:diff:Observation.code:large']!;
  const referenced = new Set(
    (corpus.get('Observation') ?? [])
      .filter((r) => member(READERS['Observation.code']!(r), codesIn))
      // A reference value matches the `Type/id` tail of an absolute reference (docs/fhir.md, search).
      .map((r) => /(?:^|\/)(Patient\/[^/]+)$/.exec(subjectOf(r) ?? '')?.[1]),
  );
  out.push([
    'Patient',
    '_has:Observation:subject:code:in=urn:diff:Observation.code:large',
    ids('Patient', (r) => referenced.has(`Patient/${r.id}`)),
  ]);
  return out;
}

async function actual(storage: Storage, reads: SearchReads, type: string, query: string): Promise<string[]> {
  const parsed = await parseSearch(type, new URLSearchParams(query), {}, reads);
  const { count: _count, ...all } = parsed.query;
  const page = await storage.searchResources(PROJECT, type, all);
  return page.resources.map((r) => r.id).sort();
}

forEachStore('token terminology modifiers against an evaluation by hand', (store, open) =>
  describe(`token terminology modifiers against an evaluation by hand (${store})`, () => {
    let storage: Storage;
    let corpus: Map<string, StoredResource[]>;
    beforeAll(async () => {
      storage = await open();
      corpus = await loadCorpus(storage, PROJECT);
    });
    afterAll(() => storage?.close());

    it(':in, :not-in, :below, :above match what the code lists say', async () => {
      const fx = fixture(corpus);
      const service = fakeTerminology({
        valueSets: fx.valueSets,
        systems: { 'http://loinc.org': fx.parents },
      });
      const reads: SearchReads = {
        ...allReads(),
        terminology: {
          service,
          source: {
            key: PROJECT,
            find: () => Promise.resolve(undefined),
          },
          maxCodes: 10_000,
        },
      };
      const all = cases(corpus, fx);
      const failures: string[] = [];
      let matched = 0;
      for (const [type, query, want] of all) {
        const got = await actual(storage, reads, type, query);
        matched += want.length;
        if (JSON.stringify(got) !== JSON.stringify(want))
          failures.push(
            `${type}?${query}: want ${want.length}, got ${got.length}; only wanted ${want.filter((id) => !got.includes(id)).join()}, only got ${got.filter((id) => !want.includes(id)).join()}`,
          );
      }
      expect(failures).toEqual([]);
      // The cases select something, and leave something out.
      expect(all.length).toBeGreaterThan(25);
      expect(all.filter(([, , want]) => want.length > 0).length).toBeGreaterThan(all.length / 2);
      expect(matched).toBeGreaterThan(100);
    });
  }),
);
