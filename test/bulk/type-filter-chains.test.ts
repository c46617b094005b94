import request from 'supertest';
import { describe, expect, it, vi } from 'vitest';
import { parseKickoff } from '../../src/bulk/kickoff-params.js';
import { resolveTypeFilterChains } from '../../src/bulk/type-filter-chains.js';
import { searchResources } from '../../src/fhir/search/search-resources.js';
import { transactionContext, type FhirContext } from '../../src/fhir/context.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import type { ParameterFilter } from '../../src/storage/search-request.js';
import { memoryStorage } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { BASE, bulkTestApp, downloadAll, exportManifest, keysOf, token } from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

// `_typeFilter` with chains and `_has` (docs/bulk-export.md "Chains and _has"): resolved at kick-off
// by the store's own search, the export holds what a type search with the same query answers.

const ref = (type: string, id: string) => ({ reference: `${type}/${id}` });
const code = (c: string) => ({ coding: [{ system: 'http://loinc.org', code: c }] });

const DATA: FhirResource[] = [
  { resourceType: 'Practitioner', id: 'dr1', name: [{ family: 'Doe' }] },
  { resourceType: 'Practitioner', id: 'dr2', name: [{ family: 'Roe' }] },
  {
    resourceType: 'Patient',
    id: 'p1',
    name: [{ family: 'Smith' }],
    generalPractitioner: [ref('Practitioner', 'dr1')],
  },
  {
    resourceType: 'Patient',
    id: 'p2',
    name: [{ family: 'Smith' }],
    generalPractitioner: [ref('Practitioner', 'dr2')],
  },
  {
    resourceType: 'Patient',
    id: 'p3',
    name: [{ family: 'Jones' }],
    generalPractitioner: [ref('Practitioner', 'dr1')],
  },
  { resourceType: 'Patient', id: 'p4', name: [{ family: 'Brown' }] },
  {
    resourceType: 'Observation',
    id: 'o1',
    status: 'final',
    code: code('1234'),
    subject: ref('Patient', 'p1'),
  },
  {
    resourceType: 'Observation',
    id: 'o2',
    status: 'final',
    code: code('5678'),
    subject: ref('Patient', 'p2'),
  },
  {
    resourceType: 'Observation',
    id: 'o3',
    status: 'final',
    code: code('1234'),
    subject: ref('Patient', 'p3'),
  },
  {
    resourceType: 'Observation',
    id: 'o4',
    status: 'final',
    code: code('1234'),
    subject: ref('Patient', 'p4'),
  },
  { resourceType: 'Observation', id: 'o5', status: 'final', code: code('1234') },
  { resourceType: 'Condition', id: 'c1', subject: ref('Patient', 'p1') },
  { resourceType: 'Condition', id: 'c2', subject: ref('Patient', 'p4') },
  {
    resourceType: 'Group',
    id: 'g1',
    type: 'person',
    actual: true,
    member: [{ entity: ref('Patient', 'p1') }, { entity: ref('Patient', 'p3') }],
  },
];

/** `Type/id` of what a type search of `proj-a` with `query` answers (the FHIR search interaction). */
async function searched(storage: Storage, filter: string): Promise<string[]> {
  const [type, query] = filter.split('?') as [string, string];
  const ctx: FhirContext = {
    storage,
    projectId: 'proj-a',
    principal: {
      projectId: 'proj-a',
      kind: 'client',
      id: 'c',
      scopes: ['system/*.*'],
      admin: false,
      superAdmin: false,
    },
    validate: () => Promise.resolve(),
    atomically: (fn) => storage.transaction((tx) => fn(transactionContext(ctx, tx))),
  };
  const { page } = await searchResources(ctx, type, new URLSearchParams(`${query}&_count=1000`));
  return page.resources.map((r) => `${r.resourceType}/${r.id}`).sort();
}

forEachStore('_typeFilter chains', (store, open) =>
  describe(`_typeFilter chains and _has (${store} store)`, () => {
    async function setup(options: { maxTypeFilterMatches?: number; maxKickoffsPerHour?: number } = {}) {
      const storage = await open();
      afterTest(() => storage.close());
      await storage.createProject({ id: 'proj-a', name: 'A', strictMode: false });
      await storage.createProject({ id: 'proj-b', name: 'B', strictMode: false });
      return bulkTestApp({ storage, seed: DATA, ...options });
    }

    const exported = async (t: Awaited<ReturnType<typeof setup>>, target: string, ...filters: string[]) => {
      const query = filters.map((f) => `_typeFilter=${encodeURIComponent(f)}`).join('&');
      const m = await exportManifest(t.app, t.auth, `${target}${target.includes('?') ? '&' : '?'}${query}`);
      return keysOf(await downloadAll(t.app, t.auth, m));
    };

    it('system level: one- and two-level chains, _has, each as the type search answers', async () => {
      const t = await setup();
      const cases: [string, string[]][] = [
        ['Observation?subject:Patient.name=Smith', ['Observation/o1', 'Observation/o2']],
        [
          'Observation?subject:Patient.general-practitioner:Practitioner.name=Doe',
          ['Observation/o1', 'Observation/o3'],
        ],
        ['Observation?subject:Patient.name=Smith&code=1234', ['Observation/o1']],
        ['Observation?subject:Patient.name=Nobody', []],
        ['Patient?_has:Observation:patient:code=1234', ['Patient/p1', 'Patient/p3', 'Patient/p4']],
        ['Patient?_has:Observation:patient:code=1234&name=Smith', ['Patient/p1']],
        ['Patient?_has:Observation:subject:subject:Patient.name=Jones', ['Patient/p3']],
        [
          'Practitioner?_has:Patient:general-practitioner:_has:Condition:patient:_id=c1',
          ['Practitioner/dr1'],
        ],
      ];
      for (const [filter, expected] of cases) {
        const type = filter.split('?')[0]!;
        expect(await searched(t.storage, filter), filter).toEqual(expected);
        expect(await exported(t, `/$export?_type=${type}`, filter), filter).toEqual(expected);
      }
      // Alternatives (ORed) mixing a chain and a plain filter; other types unfiltered.
      expect(
        await exported(
          t,
          '/$export?_type=Observation,Condition',
          'Observation?subject:Patient.name=Jones',
          'Observation?_id=o5',
        ),
      ).toEqual(['Condition/c1', 'Condition/c2', 'Observation/o3', 'Observation/o5']);
      // The CLI's help example still works beside them.
      expect(await exported(t, '/$export?_type=Observation', 'Observation?code=1234')).toEqual(
        await searched(t.storage, 'Observation?code=1234'),
      );
    });

    it('Patient and Group level: within the compartments exported', async () => {
      const t = await setup();
      expect(
        await exported(
          t,
          '/Patient/$export?_type=Observation,Patient',
          'Observation?subject:Patient.general-practitioner:Practitioner.name=Doe',
          'Patient?_has:Observation:patient:code=5678',
        ),
      ).toEqual(['Observation/o1', 'Observation/o3', 'Patient/p2']);
      // g1 holds p1 and p3.
      expect(
        await exported(
          t,
          '/Group/g1/$export?_type=Observation,Patient',
          'Observation?subject:Patient.name=Smith',
          'Patient?_has:Observation:patient:code=1234',
        ),
      ).toEqual(['Observation/o1', 'Patient/p1', 'Patient/p3']);
    });

    it('a resolved set over maxTypeFilterMatches answers 400 too-costly; a type the token does not cover 403', async () => {
      const t = await setup({ maxTypeFilterMatches: 2 });
      const kickoff = (filter: string, auth = t.auth) =>
        request(t.app)
          .get(`${BASE}/$export?_typeFilter=${encodeURIComponent(filter)}`)
          .set('Authorization', auth)
          .set('Prefer', 'respond-async');
      // Two Smiths: at the limit; three Observations with code 1234 and a subject: over it.
      expect((await kickoff('Observation?subject:Patient.name=Smith')).status).toBe(202);
      const tooMany = await kickoff('Patient?_has:Observation:patient:code=1234');
      expectOperationOutcome(tooMany, 400);
      expect(tooMany.body.issue[0].code).toBe('too-costly');
      expect(tooMany.body.issue[0].expression).toEqual(['_typeFilter']);
      const observationsOnly = token('proj-a', { scopes: ['system/Observation.rs'] });
      const forbidden = await kickoff('Observation?subject:Patient.name=Smith', observationsOnly);
      expectOperationOutcome(forbidden, 403);
    });

    it('a kick-off the limits refuse (429) runs none of its chain searches', async () => {
      const t = await setup({ maxKickoffsPerHour: 1 });
      const searches = vi.spyOn(t.storage, 'searchResources');
      const kickoff = (filter: string) =>
        request(t.app)
          .get(`${BASE}/$export?_typeFilter=${encodeURIComponent(filter)}`)
          .set('Authorization', t.auth)
          .set('Prefer', 'respond-async');
      expect((await kickoff('Observation?subject:Patient.name=Smith')).status).toBe(202);
      expect(searches).toHaveBeenCalled();
      searches.mockClear();
      const refused = await kickoff('Patient?_has:Observation:patient:code=1234');
      expectOperationOutcome(refused, 429);
      expect(searches).not.toHaveBeenCalled();
    });
  }),
);

describe('resolveTypeFilterChains', () => {
  it('reads every match page by page, and stops past maxMatches', async () => {
    const storage = memoryStorage();
    afterTest(() => storage.close());
    const registry = await loadSearchRegistry();
    const patients = Array.from({ length: 2500 }, (_, i) => ({
      op: 'update' as const,
      resource: { resourceType: 'Patient', id: `p${i}`, name: [{ family: i % 5 === 0 ? 'Jones' : 'Smith' }] },
    }));
    await storage.writeResources('proj', patients);
    const { params } = parseKickoff({
      registry,
      level: 'system',
      method: 'GET',
      query: { _typeFilter: 'Observation?subject:Patient.name=Smith' },
    });
    const ctx = {
      storage,
      projectId: 'proj',
      registry,
      canSee: () => true,
      maxMatches: 2000,
    };
    const [resolved] = await resolveTypeFilterChains(params.typeFilterSearches!, ['Observation'], ctx);
    const filter = resolved!.filters[0]!;
    expect(filter.kind === 'parameter' && filter.type).toBe('reference');
    const ids = (filter as ParameterFilter).values.map((v) => (v as { id: string }).id);
    expect(ids).toHaveLength(2000);
    expect(new Set(ids).size).toBe(2000);
    expect(ids.every((id) => Number(id.slice(1)) % 5 !== 0)).toBe(true);
    // Plain data, kept with the job.
    expect(structuredClone(resolved)).toEqual(resolved);
    // Not exported: left as parsed.
    expect(await resolveTypeFilterChains(params.typeFilterSearches!, ['Patient'], ctx)).toEqual(
      params.typeFilterSearches,
    );
    await expect(
      resolveTypeFilterChains(params.typeFilterSearches!, ['Observation'], { ...ctx, maxMatches: 1999 }),
    ).rejects.toMatchObject({ status: 400, issueCode: 'too-costly' });
  });
});
