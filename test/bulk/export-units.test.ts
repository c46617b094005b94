import { IMPORT_DEFINITION } from '../../src/bulk/operation-definitions.js';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  BULK_DATA_CAPABILITY_STATEMENT,
  bulkExportCapability,
  withBulkExportCapability,
} from '../../src/bulk/capability.js';
import { elementsFor, projectElements } from '../../src/search/elements.js';
import { resolveGroupMembers } from '../../src/bulk/group-members.js';
import { loadMandatoryElements, mandatoryElementsOf } from '../../src/search/element-tables.js';
import { NdjsonFileWriter } from '../../src/bulk/ndjson-file-writer.js';
import { parseTypeFilter, typeFilterTests } from '../../src/bulk/type-filter.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { NotFoundError } from '../../src/storage/errors.js';
import type { StoredResource } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';

const line = (i: number) =>
  `${JSON.stringify({ resourceType: 'Basic', id: `b${i}`, pad: 'x'.repeat(i % 7) })}\n`;

describe('NdjsonFileWriter', () => {
  it('splits at whole lines, never above the limit, and renames finished files', async () => {
    const dir = tempDir();
    const writer = new NdjsonFileWriter(dir, 'Basic', 100);
    const lines = Array.from({ length: 40 }, (_, i) => line(i));
    // Mixed chunk sizes and representations.
    for (let i = 0; i < lines.length; i += 5) {
      const chunk = lines.slice(i, i + 5).join('');
      await writer.write(i % 10 === 0 ? chunk : new TextEncoder().encode(chunk), 5);
    }
    const files = await writer.finish();
    expect(files.reduce((n, f) => n + f.count, 0)).toBe(40);
    const names = fs.readdirSync(dir).sort();
    expect(names).toEqual(files.map((f) => f.file).sort());
    let all = '';
    for (const f of files) {
      const text = fs.readFileSync(path.join(dir, f.file), 'utf8');
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(100);
      expect(Buffer.byteLength(text)).toBe(f.size);
      expect(text.split('\n').filter(Boolean)).toHaveLength(f.count);
      all += text;
    }
    expect(all).toBe(lines.join(''));
  });

  it('a line longer than the limit gets a file of its own', async () => {
    const dir = tempDir();
    const writer = new NdjsonFileWriter(dir, 'Basic', 10);
    await writer.write(`${'{"a":1}'}\n${JSON.stringify({ long: 'y'.repeat(50) })}\n{"b":2}\n`, 3);
    const files = await writer.finish();
    expect(files.map((f) => f.count)).toEqual([1, 1, 1]);
  });

  it('abort removes the unfinished file; nothing written means no file', async () => {
    const dir = tempDir();
    const writer = new NdjsonFileWriter(dir, 'Basic', 1000);
    await writer.write(line(1), 1);
    expect(fs.readdirSync(dir)).toEqual(['.Basic-1.ndjson.part']);
    await writer.abort();
    expect(fs.readdirSync(dir)).toEqual([]);
    expect(await new NdjsonFileWriter(dir, 'X', 10).finish()).toEqual([]);
  });
});

describe('_elements', () => {
  it('applies typed and untyped entries, keeps id/meta, tags SUBSETTED', () => {
    const patient = elementsFor('Patient', ['Patient.name', 'status']);
    expect([...patient.names].sort()).toEqual(['name', 'status']);
    // A type no entry names keeps the unqualified entries and its mandatory elements only.
    const observation = elementsFor('Observation', ['Patient.name', 'id'], ['status', 'code']);
    expect([...observation.names].sort()).toEqual(['code', 'id', 'status']);
    expect(elementsFor('Observation', ['Patient.name']).names.size).toBe(0);
    const r = {
      resourceType: 'Observation',
      id: '1',
      meta: { versionId: '1', tag: [{ code: 'x' }] },
      status: 'final',
      valueQuantity: { value: 1 },
      _status: { id: 'e' },
      code: {},
    };
    const out = projectElements(r, elementsFor('Observation', ['status', 'value[x]']));
    expect(Object.keys(out).sort()).toEqual([
      '_status',
      'id',
      'meta',
      'resourceType',
      'status',
      'valueQuantity',
    ]);
    // Exactly system and code, as the IG's examples (and the bdt conformance kit) have it.
    expect((out.meta as { tag: unknown[] }).tag).toEqual([
      { code: 'x' },
      { system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue', code: 'SUBSETTED' },
    ]);
    expect(r.meta.tag).toHaveLength(1);
    // Already tagged: not twice.
    const again = projectElements(out, elementsFor('Observation', ['status']));
    expect((again.meta as { tag: unknown[] }).tag).toHaveLength(2);
    // Mandatory choice elements keep every variant.
    const request = projectElements(
      { resourceType: 'MedicationRequest', id: 'm', medicationCodeableConcept: { text: 'a' }, note: [] },
      elementsFor('MedicationRequest', ['id'], ['medication[x]']),
    );
    expect(Object.keys(request).sort()).toEqual(['id', 'medicationCodeableConcept', 'meta', 'resourceType']);
  });

  it('mandatory elements come from the R4 StructureDefinitions', async () => {
    const table = await loadMandatoryElements();
    expect(table.get('Observation')).toEqual(['status', 'code']);
    expect(table.get('Provenance')).toEqual(['target', 'recorded', 'agent']);
    expect(table.get('MedicationRequest')).toEqual(
      expect.arrayContaining(['status', 'intent', 'medication[x]', 'subject']),
    );
    expect(table.get('Patient')).toEqual([]);
    expect(await loadMandatoryElements()).toBe(table);
    expect(
      mandatoryElementsOf({
        entry: [
          {
            resource: {
              resourceType: 'StructureDefinition',
              kind: 'resource',
              type: 'X',
              snapshot: {
                element: [
                  { path: 'X', min: 1 },
                  { path: 'X.a', min: 1 },
                  { path: 'X.b', min: 0 },
                  { path: 'X.a.c', min: 1 },
                ],
              },
            },
          },
          {
            resource: {
              resourceType: 'StructureDefinition',
              kind: 'resource',
              derivation: 'constraint',
              type: 'Y',
            },
          },
          { resource: { resourceType: 'StructureDefinition', kind: 'complex-type', type: 'Z' } },
        ],
      }),
    ).toEqual(new Map([['X', ['a']]]));
  });
});

describe('_typeFilter', () => {
  const tests = async (filters: string[]) => {
    const registry = await loadSearchRegistry();
    const searches = filters.map((filter) => {
      const parsed = parseTypeFilter(registry, filter);
      if (!('search' in parsed)) throw new Error(parsed.problem);
      return parsed.search;
    });
    return typeFilterTests(registry, searches);
  };
  const obs = (id: string, extra: Record<string, unknown> = {}) =>
    ({
      resourceType: 'Observation',
      id,
      meta: { versionId: '1', lastUpdated: '2024-01-01T00:00:00Z' },
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '1234' }] },
      ...extra,
    }) as StoredResource;

  it('refuses the token terminology modifiers (not-supported): the worker has no terminology', async () => {
    const registry = await loadSearchRegistry();
    for (const filter of [
      'Observation?status:in=http://hl7.org/fhir/ValueSet/observation-status',
      'Observation?code:not-in=http://acme.org/vs',
      'Condition?code:below=urn:s%7Cparent',
      'Condition?code:above=urn:s%7Cchild',
      'Observation?subject:Patient.gender:in=http://hl7.org/fhir/ValueSet/administrative-gender',
      'Patient?_has:Observation:patient:status:in=http://hl7.org/fhir/ValueSet/observation-status',
    ]) {
      expect(parseTypeFilter(registry, filter), filter).toMatchObject({ code: 'not-supported' });
    }
    // A uri's :below is a plain prefix test, still applied.
    expect(parseTypeFilter(registry, 'ValueSet?url:below=http://acme.org/')).toHaveProperty('search');
  });

  it('filters of one type are ORed; a type without a filter has no test', async () => {
    const filters = await tests(['Observation?_id=a', 'Observation?subject=Patient/p', 'Condition?_id=c']);
    const test = filters.get('Observation')!;
    expect(test(obs('a', { subject: { reference: 'Patient/q' } }))).toBe(true);
    expect(test(obs('b', { subject: { reference: 'Patient/p' } }))).toBe(true);
    expect(test(obs('b', { subject: { reference: 'Patient/q' } }))).toBe(false);
    expect(filters.has('Condition')).toBe(true);
    expect(filters.has('Patient')).toBe(false);
  });

  it('parameters of one filter are ANDed, commas OR values, with modifiers and prefixes', async () => {
    const filters = await tests([
      `Observation?${new URLSearchParams({
        code: 'http://loinc.org|1234,http://loinc.org|5678',
        category: 'laboratory',
        date: 'ge2020-03',
      }).toString()}`,
    ]);
    const test = filters.get('Observation')!;
    const lab = { category: [{ coding: [{ code: 'laboratory' }] }] };
    expect(test(obs('a', { ...lab, effectiveDateTime: '2020-03-05' }))).toBe(true);
    expect(test(obs('b', { ...lab, effectiveDateTime: '2020-02-05' }))).toBe(false);
    expect(test(obs('c', { effectiveDateTime: '2021-01-01' }))).toBe(false);
    expect(
      test(obs('d', { ...lab, effectiveDateTime: '2021-01-01', code: { coding: [{ code: '1234' }] } })),
    ).toBe(false);
  });

  it('applies identifier tokens', async () => {
    const filters = await tests(['Observation?identifier=urn:lab|1,|free', 'Observation?identifier=urn:x|']);
    const test = filters.get('Observation')!;
    const withId = (identifier: unknown) => obs('o', { identifier });
    expect(test(withId([{ system: 'urn:lab', value: '1' }]))).toBe(true);
    expect(test(withId([{ system: 'urn:lab', value: '2' }, { value: 'free' }]))).toBe(true);
    expect(test(withId([{ system: 'urn:x', value: '9' }]))).toBe(true);
    expect(
      test(
        withId([
          { system: 'urn:lab', value: '2' },
          { system: 'urn:y', value: 'free' },
        ]),
      ),
    ).toBe(false);
    expect(test(obs('o'))).toBe(false);
  });
});

describe('resolveGroupMembers', () => {
  const groups: Record<string, unknown[]> = {
    a: [
      { entity: { reference: 'Patient/1' } },
      { entity: { reference: 'Group/b' } },
      { entity: { reference: 'Group/missing' } },
    ],
    b: [
      { entity: { reference: 'Patient/2' }, period: { start: '2030-01-01T00:00:00Z' } },
      { entity: { reference: 'Group/a' } },
      { entity: { reference: 'Group/b' } },
      { entity: { reference: 'Patient/3' }, inactive: true },
      { entity: { reference: 'Practitioner/x' } },
    ],
  };
  const storage = {
    readResource: (_p: string, _t: string, id: string) =>
      groups[id]
        ? Promise.resolve({
            resourceType: 'Group',
            id,
            member: groups[id],
            meta: { versionId: '1', lastUpdated: '' },
          } as StoredResource)
        : Promise.reject(new NotFoundError('no')),
  };

  it('resolves nested Groups once each (cycles end), skips inactive members and missing nested Groups', async () => {
    expect(await resolveGroupMembers(storage, 'p', 'a')).toEqual({ patientIds: ['1', '2'], addedSince: [] });
    expect(await resolveGroupMembers(storage, 'p', 'b')).toEqual({ patientIds: ['2', '1'], addedSince: [] });
  });

  it('members whose period starts after _since are reported as added', async () => {
    const since = Date.parse('2025-01-01T00:00:00Z');
    expect((await resolveGroupMembers(storage, 'p', 'a', since)).addedSince).toEqual(['2']);
  });

  it('an unknown Group is NotFoundError', async () => {
    await expect(resolveGroupMembers(storage, 'p', 'zzz')).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe('withBulkExportCapability', () => {
  const definitions = 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/';
  const operationsOf = (owner: Record<string, unknown> | undefined) =>
    (owner?.operation as { name: string; definition: string }[] | undefined) ?? [];

  it('adds instantiates, $export at system level and on Patient and Group, once, without mutating its input', () => {
    const cs = {
      resourceType: 'CapabilityStatement',
      rest: [
        {
          mode: 'server',
          operation: [{ name: 'export', definition: `${definitions}export` }],
          resource: [{ type: 'Patient', interaction: [{ code: 'read' }] }],
        },
      ],
    };
    const out = withBulkExportCapability(cs);
    expect(out.instantiates).toEqual([BULK_DATA_CAPABILITY_STATEMENT]);
    const server = out.rest[0]!;
    expect(operationsOf(server)).toEqual([{ name: 'export', definition: `${definitions}export` }]);
    const resources = server.resource as Record<string, unknown>[];
    const patient = resources.find((r) => r.type === 'Patient');
    const group = resources.find((r) => r.type === 'Group');
    expect(patient?.interaction).toEqual([{ code: 'read' }]);
    expect(operationsOf(patient)).toEqual([{ name: 'export', definition: `${definitions}patient-export` }]);
    expect(operationsOf(group)).toEqual([{ name: 'export', definition: `${definitions}group-export` }]);
    expect(cs.rest[0]!.operation).toHaveLength(1);
    expect(cs.rest[0]!.resource).toHaveLength(1);
    const twice = withBulkExportCapability(out);
    expect(twice).toEqual(out);
    const bare = withBulkExportCapability({ resourceType: 'CapabilityStatement' });
    expect(bare.rest).toHaveLength(1);
    expect(operationsOf(bare.rest[0]).map((o) => o.name)).toEqual(['export']);
    expect((bare.rest[0]!.resource as { type: string }[]).map((r) => r.type)).toEqual(['Patient', 'Group']);
  });
});

describe('bulkExportCapability', () => {
  it('is a capability contribution: $export at system level, on Patient and on Group, each with its definition, and $import', () => {
    const c = bulkExportCapability();
    expect(c.instantiates).toEqual([BULK_DATA_CAPABILITY_STATEMENT]);
    const definitions = 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/';
    const exports = c.operations.filter((o) => o.name === 'export');
    expect(exports.map((o) => [o.name, o.definition.slice(definitions.length), o.resourceTypes])).toEqual([
      ['export', 'export', undefined],
      ['export', 'patient-export', ['Patient']],
      ['export', 'group-export', ['Group']],
    ]);
    expect(c.operations.filter((o) => o.name === 'import')).toEqual([
      { name: 'import', definition: IMPORT_DEFINITION },
    ]);
    // Without $import (`import: false`), the exports only.
    expect(bulkExportCapability({ import: false }).operations).toEqual(exports);
  });
});
