import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { generatePatients, prng } from '../../bench/dataset.js';
import { readSynthea } from '../../bench/synthea.js';
import type { SearchRegistry } from '../../src/search/definitions.js';
import { extractComposite, extractValues } from '../../src/search/extract.js';
import { compileSearchPredicate, type SearchResolver } from '../../src/search/match.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import type { IndexValue } from '../../src/storage/index-values.js';
import type { FhirResource, Storage, StoredResource } from '../../src/storage/types.js';

/*
 * The differential search tests' queries and oracle (test/search/differential-postgres.test.ts,
 * differential-embedded.test.ts): queries drawn from the data for every parameter of every type
 * present, every parameter type, prefix and modifier, composites, one- and two-level chains and
 * `_has`, plus edge resources and explicit queries; `expected` answers them with match.ts.
 */

export const SYNTHEA = fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
export const hasSynthea = fs.existsSync(SYNTHEA);

/** Characters that need escaping in a search value: values holding them are not drawn. */
const SPECIAL = /[,|$\\]/;

const iso = (ms: number, length: number) => new Date(ms).toISOString().slice(0, length);
const ok = (text: string | undefined): text is string =>
  text !== undefined && text !== '' && !SPECIAL.test(text);
const num = (n: number | undefined): string | undefined =>
  n === undefined || !Number.isFinite(n) || String(n).includes('e') ? undefined : String(n);

/** Search values (with modifier suffixes `[:modifier]=value`) a value of a parameter gives. */
export function queriesFor(v: IndexValue): string[] {
  switch (v.type) {
    case 'string': {
      if (!ok(v.exact)) return [];
      const out = [`=${encodeURIComponent(v.exact.slice(0, 3))}`, `:exact=${encodeURIComponent(v.exact)}`];
      if (v.normalized.length > 3) out.push(`:contains=${encodeURIComponent(v.normalized.slice(1, 4))}`);
      return out;
    }
    case 'token': {
      const out: string[] = [];
      if (ok(v.code)) {
        const code = encodeURIComponent(v.code);
        out.push(`=${code}`, `:not=${code}`);
        if (v.system === undefined) out.push(`=|${code}`);
        else if (ok(v.system))
          out.push(`=${encodeURIComponent(v.system)}|${code}`, `=${encodeURIComponent(v.system)}|`);
        const [type] = v.types ?? [];
        if (type && ok(type.system) && ok(type.code)) {
          out.push(`:of-type=${encodeURIComponent(type.system)}|${encodeURIComponent(type.code)}|${code}`);
        }
      }
      const word = v.text?.split(' ')[0];
      if (ok(word)) out.push(`:text=${encodeURIComponent(word)}`);
      return out;
    }
    case 'date': {
      if (v.start === undefined || v.start < 0) return [];
      const day = iso(v.start, 10);
      const month = iso(v.start, 7);
      return [
        day,
        `ge${month}`,
        `le${month}`,
        `gt${iso(v.start, 4)}`,
        `lt${day}`,
        `ne${day}`,
        `sa${day}`,
        `eb${day}`,
        `ap${day}`,
      ].map((q) => `=${q}`);
    }
    case 'number':
    case 'quantity': {
      const n = num(v.value ?? v.low ?? v.high);
      if (n === undefined) return [];
      const out = ['', 'gt', 'le', 'ne', 'ap', 'sa', 'eb'].map((p) => `=${p}${n}`);
      if (v.type === 'quantity' && ok(v.code)) {
        out.push(`=${n}||${encodeURIComponent(v.code)}`);
        if (ok(v.system)) out.push(`=gt${n}|${encodeURIComponent(v.system)}|${encodeURIComponent(v.code)}`);
      }
      return out;
    }
    case 'reference': {
      const out: string[] = [];
      if (ok(v.resourceType) && ok(v.id))
        out.push(`=${v.resourceType}/${v.id}`, `:${v.resourceType}=${v.id}`, `=${v.id}`);
      if (ok(v.url)) out.push(`=${encodeURIComponent(v.url)}`);
      if (v.identifier && ok(v.identifier.value)) {
        const system = ok(v.identifier.system) ? encodeURIComponent(v.identifier.system) : '';
        out.push(`:identifier=${system}|${encodeURIComponent(v.identifier.value)}`);
      }
      return out;
    }
    case 'uri':
      if (!ok(v.value)) return [];
      return [
        `=${encodeURIComponent(v.value)}`,
        `:below=${encodeURIComponent(v.value.slice(0, -3))}`,
        `:above=${encodeURIComponent(`${v.value}/x`)}`,
      ];
  }
}

/** A composite component's value as the text of one `$` part, or undefined. */
export function componentText(v: IndexValue | undefined): string | undefined {
  if (!v) return undefined;
  switch (v.type) {
    case 'token':
      if (!ok(v.code)) return undefined;
      return ok(v.system) ? `${v.system}|${v.code}` : v.code;
    case 'quantity':
    case 'number': {
      const n = num(v.value ?? v.low);
      if (n === undefined) return undefined;
      return v.type === 'quantity' && ok(v.system) && ok(v.code) ? `${n}|${v.system}|${v.code}` : n;
    }
    case 'date':
      return v.start === undefined ? undefined : iso(v.start, 10);
    case 'string':
      return ok(v.exact) ? v.exact : undefined;
    case 'reference':
      return ok(v.resourceType) && ok(v.id) ? `${v.resourceType}/${v.id}` : undefined;
    case 'uri':
      return ok(v.value) ? v.value : undefined;
  }
}

/** Queries (`code[:modifier]=value`) on `resources` of `type`: up to `per` values of each parameter. */
export function drawQueries(
  registry: SearchRegistry,
  resources: readonly FhirResource[],
  type: string,
  per: number,
  seed: number,
): string[] {
  const rand = prng(seed);
  const out: string[] = [];
  for (const def of registry.parameters(type)) {
    if (def.type === 'special' || def.branches.length === 0) continue;
    const candidates: string[] = [];
    for (const resource of resources) {
      if (def.type === 'composite') {
        for (const element of extractComposite(registry, def, resource)) {
          const parts = element.components.map((c) => componentText(c[0]));
          if (parts.every((p) => p !== undefined)) candidates.push(`=${encodeURIComponent(parts.join('$'))}`);
        }
      } else {
        for (const value of extractValues(registry, def, resource)) candidates.push(...queriesFor(value));
      }
      if (candidates.length > 60) break;
    }
    out.push(`${def.code}:missing=true`, `${def.code}:missing=false`);
    const unique = [...new Set(candidates)];
    for (let i = 0; i < per && unique.length > 0; i++) {
      const [pick] = unique.splice(Math.floor(rand() * unique.length), 1);
      out.push(`${def.code}${pick!}`);
    }
  }
  return out;
}

/** Chains (one and two levels) and `_has` over the plain queries of each type. */
export function drawJoins(
  registry: SearchRegistry,
  plain: Map<string, string[]>,
  seed: number,
): [string, string][] {
  const rand = prng(seed);
  const pick = (list: string[]) => list[Math.floor(rand() * list.length)]!;
  const out: [string, string][] = [];
  const chains = new Map<string, string[]>();
  const usable = (type: string) =>
    (plain.get(type) ?? []).filter((q) => !q.includes(':missing') && !q.startsWith('_'));
  for (const type of plain.keys()) {
    for (const def of registry.parameters(type)) {
      if (def.type !== 'reference') continue;
      for (const target of def.targets.filter((t) => usable(t).length > 0).slice(0, 2)) {
        const inner = pick(usable(target));
        const chain = `${def.code}:${target}.${inner}`;
        out.push([type, chain]);
        chains.set(type, [...(chains.get(type) ?? []), chain]);
        // `_has`: resources of `target` referenced by a `type` matching a query of its own.
        out.push([target, `_has:${type}:${def.code}:${pick(usable(type))}`]);
      }
    }
  }
  // Two levels: a chain whose target's query is itself a chain.
  for (const type of plain.keys()) {
    for (const def of registry.parameters(type)) {
      if (def.type !== 'reference') continue;
      const target = def.targets.find((t) => (chains.get(t) ?? []).length > 0);
      if (target && rand() < 0.3) out.push([type, `${def.code}:${target}.${pick(chains.get(target)!)}`]);
    }
  }
  return out;
}

/** Edge cases of the SQL translation: ranges, open periods, units, identifier types, absolute references. */
export function edgeResources(): FhirResource[] {
  return [
    {
      resourceType: 'Observation',
      id: 'edge-range',
      status: 'final',
      code: { coding: [{ system: 'urn:c', code: 'R' }], text: 'Ranged value' },
      valueRange: { low: { value: 5, unit: 'mg', system: 'urn:u', code: 'mg' }, high: { value: 7 } },
      effectivePeriod: { start: '2019-05-01' },
      subject: { reference: 'https://elsewhere.org/fhir/Patient/edge-p' },
      component: [
        { code: { coding: [{ system: 'urn:c', code: 'C1' }] }, valueQuantity: { value: 2.5, unit: 'g' } },
      ],
    },
    {
      resourceType: 'Patient',
      id: 'edge-p',
      name: [{ family: 'Ürsel', given: ['Ann Marie'] }],
      identifier: [
        {
          system: 'urn:mrn',
          value: '77',
          type: { coding: [{ system: 'urn:t', code: 'MR' }], text: 'Medical record' },
        },
      ],
      generalPractitioner: [
        { identifier: { system: 'urn:npi', value: '12' } },
        { reference: 'Practitioner/d1/_history/3' },
      ],
      deceasedBoolean: false,
    },
    {
      resourceType: 'ValueSet',
      id: 'edge-vs',
      status: 'active',
      url: 'http://example.org/fhir/ValueSet/abc',
    },
    {
      resourceType: 'RiskAssessment',
      id: 'edge-ra',
      status: 'final',
      subject: { reference: 'Patient/edge-p' },
      prediction: [
        { probabilityDecimal: 0.25 },
        { probabilityRange: { low: { value: 0.5 }, high: { value: 0.75 } } },
      ],
    },
    {
      resourceType: 'Patient',
      id: 'edge-q',
      name: [{ family: 'x'.repeat(150), given: ['Ursula'] }],
      identifier: [{ value: 'y'.repeat(140) }],
    },
  ];
}

/** Queries on the edge resources, so that each kind is asked at least once whatever is drawn. */
export const EXPLICIT: [string, string][] = [
  ['ValueSet', 'url=http://example.org/fhir/ValueSet/abc'],
  ['ValueSet', 'url:below=http://example.org/fhir'],
  ['ValueSet', 'url:above=http://example.org/fhir/ValueSet/abc/v2'],
  ['RiskAssessment', 'probability=gt0.2'],
  ['RiskAssessment', 'probability=0.6'],
  ['RiskAssessment', 'probability=ap0.7'],
  ['RiskAssessment', 'subject:Patient.name=urs'],
  ['Patient', 'identifier:of-type=urn:t|MR|77'],
  ['Patient', 'identifier:text=medical'],
  ['Patient', `identifier=${'y'.repeat(140)}`],
  ['Patient', `family=${'x'.repeat(120)}`],
  ['Patient', 'general-practitioner:identifier=urn:npi|12'],
  ['Patient', 'general-practitioner=Practitioner/d1'],
  ['Patient', '_has:RiskAssessment:subject:probability=lt0.3'],
  // Issue 44's costly shapes: `_has` with `:missing`, nested `_has`, a filter repeated.
  ['Patient', '_has:Observation:subject:value-quantity:missing=false'],
  ['Patient', '_has:Observation:subject:value-quantity:missing=true'],
  ['Patient', '_has:Observation:subject:_has:DiagnosticReport:result:status=final'],
  ['Patient', '_has:Encounter:subject:_has:Observation:encounter:status=final'],
  ['Observation', 'code:text=body&code:text=body&code:text=body'],
  ['Observation', 'status=final&value-quantity:missing=false&status=final'],
  ['Observation', 'value-quantity=6'],
  ['Observation', 'value-quantity=ge6||mg'],
  ['Observation', 'value-quantity=lt7|urn:u|mg'],
  ['Observation', 'code-value-quantity=urn:c|R$ge5'],
  ['Observation', 'component-code-value-quantity=urn:c|C1$2.5'],
  ['Observation', 'date=sa2019-01-01'],
  ['Observation', 'date=eb2019-06-01'],
  ['Observation', 'subject=https://elsewhere.org/fhir/Patient/edge-p'],
  ['Observation', 'subject:Patient=edge-p'],
];

/** What `match.ts` answers: the ids of `resources` of `type` matching `query`, in id order. */
export async function expected(
  registry: SearchRegistry,
  corpus: Map<string, StoredResource[]>,
  type: string,
  query: string,
): Promise<string[]> {
  const { request } = parseSearchRequest(registry, type, new URLSearchParams(query));
  const resolver: SearchResolver = { resources: (t) => corpus.get(t) ?? [] };
  const test = await compileSearchPredicate(registry, request.filters, resolver);
  return (corpus.get(type) ?? [])
    .filter((r) => test(r))
    .map((r) => r.id)
    .sort();
}

/**
 * Writes generated resources, the edge resources and (when present) the first 60 resources of each
 * type of the Synthea sample into `projectId`, as updates in batches of 500; answers the current
 * versions by type (the corpus `expected` reads).
 */
export async function loadCorpus(
  storage: Storage,
  projectId: string,
): Promise<Map<string, StoredResource[]>> {
  const byType = new Map<string, number>();
  const synthea = hasSynthea
    ? readSynthea(SYNTHEA).filter((r) => {
        const n = byType.get(r.resourceType) ?? 0;
        byType.set(r.resourceType, n + 1);
        return n < 60;
      })
    : [];
  const resources = [...(generatePatients(3, 5) as Iterable<FhirResource>), ...edgeResources(), ...synthea];
  // Synthea repeats shared resources (organizations, practitioners) in each bundle: updates.
  const current = new Map<string, StoredResource>();
  for (let i = 0; i < resources.length; i += 500) {
    const results = await storage.writeResources(
      projectId,
      resources.slice(i, i + 500).map((resource) => ({
        op: 'update' as const,
        resource: resource as FhirResource & { id: string },
      })),
    );
    for (const { resource } of results) current.set(`${resource!.resourceType}/${resource!.id}`, resource!);
  }
  const corpus = new Map<string, StoredResource[]>();
  for (const resource of current.values()) {
    corpus.set(resource.resourceType, [...(corpus.get(resource.resourceType) ?? []), resource]);
  }
  return corpus;
}

/** Every drawn, joined and explicit query over `corpus` (the same draw for every store). */
export function allQueries(
  registry: SearchRegistry,
  corpus: Map<string, StoredResource[]>,
): [string, string][] {
  const plain = new Map<string, string[]>();
  let seed = 1;
  for (const [type, list] of corpus) plain.set(type, drawQueries(registry, list, type, 2, seed++));
  const queries = [...plain].flatMap(([type, list]) => list.map((q) => [type, q] as [string, string]));
  queries.push(...drawJoins(registry, plain, 5), ...EXPLICIT);
  return queries;
}
