// The service over the R4 definitions (FHIR, v3 and v2 code systems), a project's resources in
// front of them, and its caches seeing a project's updates.
import { beforeAll, describe, expect, it } from 'vitest';
import type { FhirResource } from '../../src/storage/types.js';
import { r4Terminology } from '../../src/terminology/r4-terminology.js';
import { TerminologyError } from '../../src/terminology/terminology-types.js';
import { VS, fixture, fixtureResources, fixtureSource } from './fixture-source.js';

const GENDER_VS = 'http://hl7.org/fhir/ValueSet/administrative-gender';
const GENDER = 'http://hl7.org/fhir/administrative-gender';
const OBSERVATION_STATUS_VS = 'http://hl7.org/fhir/ValueSet/observation-status';
const ACT_CODE = 'http://terminology.hl7.org/CodeSystem/v3-ActCode';
const MARITAL_VS = 'http://hl7.org/fhir/ValueSet/marital-status';
const V2_0203 = 'http://terminology.hl7.org/CodeSystem/v2-0203';

const tx = r4Terminology();
beforeAll(() => tx.load());

describe('R4 definitions', () => {
  it('expands administrative-gender', async () => {
    const found = await tx.expand(GENDER_VS, {});
    expect(found.contains.map((c) => c.code)).toEqual(['male', 'female', 'other', 'unknown']);
    expect(found.contains[0]).toMatchObject({ system: GENDER, display: 'Male', version: '4.0.1' });
  });

  it('validates observation-status codes', async () => {
    const final = await tx.validateCode('ValueSet', { url: OBSERVATION_STATUS_VS, code: 'final' });
    expect(final).toMatchObject({ result: true, system: 'http://hl7.org/fhir/observation-status' });
    expect(
      (await tx.validateCode('ValueSet', { url: OBSERVATION_STATUS_VS, code: 'finalized' })).result,
    ).toBe(false);
  });

  it('reads a v3 hierarchy: abstract groupers, parents, subsumption', async () => {
    const cash = await tx.lookup({ system: ACT_CODE, code: 'CASH' });
    expect(cash.parameter).toContainEqual({
      name: 'property',
      part: [
        { name: 'code', valueCode: 'parent' },
        { name: 'value', valueCode: '_ActAccountCode' },
      ],
    });
    expect(await tx.subsumes({ system: ACT_CODE, codeA: '_ActAccountCode', codeB: 'CASH' })).toBe('subsumes');
    const below = await tx.hierarchy(ACT_CODE, '_ActAccountCode', 'below', 1000);
    expect(below[0]).toMatchObject({ code: '_ActAccountCode', abstract: true });
    expect(below.map((c) => c.code)).toContain('CASH');
  });

  it('expands a value set over two v3 systems', async () => {
    const found = await tx.expand(MARITAL_VS, {});
    expect(found.contains.map((c) => c.code)).toContain('M');
    expect(found.contains.at(-1)).toMatchObject({
      code: 'UNK',
      system: 'http://terminology.hl7.org/CodeSystem/v3-NullFlavor',
    });
  });

  it('reads v2 tables: deprecated codes are inactive', async () => {
    const mr = await tx.validateCode('CodeSystem', {
      url: V2_0203,
      code: 'MR',
      display: 'Medical record number',
    });
    expect(mr).toMatchObject({ result: true, version: '2.9' });
    const pad = await tx.validateCode('CodeSystem', {
      url: 'http://terminology.hl7.org/CodeSystem/v2-0290',
      code: '(pad)',
    });
    expect(pad).toMatchObject({ result: true, inactive: true });
    const page = await tx.expand('http://terminology.hl7.org/ValueSet/v2-0203', { count: 2 });
    expect(page.total).toBeGreaterThan(100);
    expect(page.contains).toHaveLength(2);
  });

  it('says which systems it holds', () => {
    expect(tx.holdsSystem(GENDER)).toBe(true);
    expect(tx.holdsSystem(ACT_CODE)).toBe(true);
    expect(tx.holdsSystem('http://snomed.info/sct')).toBe(false); // content not-present
    expect(tx.holdsSystem('http://loinc.org')).toBe(false);
  });
});

describe('membership', () => {
  it('answers a FHIR code (no system) by its code', () => {
    expect(tx.membership(`${GENDER_VS}|4.0.1`, undefined, 'male')).toBe('member');
    expect(tx.membership(`${GENDER_VS}|4.0.1`, undefined, 'mail')).toBe('not-member');
    expect(tx.membership(OBSERVATION_STATUS_VS, undefined, 'finalized')).toBe('not-member');
  });

  it('answers a coding by system and code', () => {
    expect(tx.membership(MARITAL_VS, 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', 'M')).toBe(
      'member',
    );
    expect(tx.membership(MARITAL_VS, 'http://terminology.hl7.org/CodeSystem/v3-NullFlavor', 'UNK')).toBe(
      'member',
    );
    expect(tx.membership(MARITAL_VS, 'http://terminology.hl7.org/CodeSystem/v3-NullFlavor', 'NI')).toBe(
      'not-member',
    );
    expect(tx.membership(GENDER_VS, 'http://example.org/other', 'male')).toBe('not-member');
  });

  it('answers unknown for a value set it does not know, or a system it does not hold', () => {
    expect(tx.membership('http://example.org/ValueSet/none', undefined, 'x')).toBe('unknown');
    const observationCodes = 'http://hl7.org/fhir/ValueSet/observation-codes';
    expect(tx.membership(observationCodes, 'http://loinc.org', '1234-5')).toBe('unknown');
    expect(tx.membership(observationCodes, undefined, '1234-5')).toBe('unknown');
    // A value set listing SNOMED codes, besides filters on it.
    expect(
      tx.membership('http://hl7.org/fhir/ValueSet/condition-stage-type', 'http://snomed.info/sct', '1'),
    ).toBe('unknown');
  });
});

describe('a project in front of the R4 definitions', () => {
  const nonbinary: FhirResource = {
    resourceType: 'CodeSystem',
    id: 'gender',
    meta: { versionId: '1' },
    url: GENDER,
    version: 'local',
    content: 'complete',
    concept: [{ code: 'male' }, { code: 'female' }, { code: 'nonbinary', display: 'Non-binary' }],
  };

  it('uses the project code system for its url, in that project only', async () => {
    const project = fixtureSource([nonbinary], 'project-a');
    const found = await tx.expand(GENDER_VS, {}, project);
    expect(found.contains.map((c) => c.code)).toEqual(['male', 'female', 'nonbinary']);
    expect((await tx.expand(GENDER_VS, {}, fixtureSource([], 'project-b'))).contains).toHaveLength(4);
    expect(tx.membership(GENDER_VS, undefined, 'nonbinary')).toBe('not-member'); // R4 only
  });

  it('sees an update of a value set or of a code system it reads', async () => {
    const resources = fixtureResources();
    const source = () => fixtureSource(resources, 'project-c');
    const service = r4Terminology();
    expect(await service.valueSetCodes(VS + 'citrus', 100, source())).toHaveLength(4);
    const fruit = fixture('codesystem-fruit.json') as FhirResource & { concept: unknown[] };
    fruit.meta = { versionId: '2' };
    fruit.concept.push({
      code: 'lime',
      display: 'Lime',
      property: [{ code: 'parent', valueCode: 'citrus' }],
    });
    resources.splice(
      resources.findIndex((r) => r.id === 'fruit'),
      1,
      fruit,
    );
    expect((await service.valueSetCodes(VS + 'citrus', 100, source())).map((c) => c.code)).toContain('lime');
    const citrus = resources.find((r) => r.id === 'citrus')!;
    resources.splice(resources.indexOf(citrus), 1, {
      ...citrus,
      meta: { versionId: '2' },
      compose: { include: [{ system: fruit.url, concept: [{ code: 'lime' }] }] },
    });
    expect((await service.valueSetCodes(VS + 'citrus', 100, source())).map((c) => c.code)).toEqual(['lime']);
  });

  it('keeps an expansion: a second ask reads the sources but expands nothing again', async () => {
    const service = r4Terminology();
    const first = await service.valueSetCodes(VS + 'polygons', 100, fixtureSource());
    expect(await service.valueSetCodes(VS + 'polygons', 100, fixtureSource())).toBe(first);
  });

  it('refuses more codes than valueSetCodes allows', async () => {
    const error = await tx.valueSetCodes(VS + 'all-shapes', 3, fixtureSource()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TerminologyError);
    expect(error).toMatchObject({ issueCode: 'too-costly' });
  });

  it('refuses an unknown value set', async () => {
    const error = await tx.valueSetCodes(VS + 'nowhere', 3).catch((e: unknown) => e);
    expect(error).toMatchObject({ issueCode: 'not-found' });
  });
});

describe('options', () => {
  it('refuses a maxExpansionSize that is not a positive integer', () => {
    expect(() => r4Terminology({ maxExpansionSize: 0 })).toThrow(TypeError);
    expect(() => r4Terminology({ maxExpansionSize: 1.5 })).toThrow(TypeError);
  });
});
