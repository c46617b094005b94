// Our own terminology cases, in the spirit of HL7's fhir-test-cases `tx/` suite (none of its files
// copied): expansion with inactive codes, versions, excludes, nested value sets, filters, paging
// and the text filter; validation of codes and displays; $lookup and $subsumes. The fixtures
// (test/terminology/fixtures) are a project's own resources, seen through its source.
import { describe, expect, it } from 'vitest';
import type { FhirResource } from '../../src/storage/types.js';
import { r4Terminology } from '../../src/terminology/r4-terminology.js';
import { TerminologyError, type SystemCode } from '../../src/terminology/terminology-types.js';
import { FRUIT, SHAPES, VS, fixtureSource } from './fixture-source.js';

const tx = r4Terminology();
const source = fixtureSource();

async function codes(id: string): Promise<string[]> {
  const expansion = await tx.expand(VS + id, {}, source);
  return expansion.contains.map((c) => c.code);
}

async function failure(promise: Promise<unknown>): Promise<string> {
  const error: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TerminologyError);
  return (error as TerminologyError).issueCode;
}

describe('$expand: versions', () => {
  it('takes the newest version of a code system when the include names none', async () => {
    const expansion = await tx.expand(VS + 'all-shapes', {}, source);
    expect(expansion.contains.map((c) => c.code)).toContain('hexagon');
    expect(new Set(expansion.contains.map((c) => c.version))).toEqual(new Set(['2.0.0']));
    expect(expansion.resource.expansion).toMatchObject({
      parameter: [{ name: 'used-codesystem', valueUri: `${SHAPES}|2.0.0` }],
    });
  });

  it('takes the version the include names', async () => {
    const found = await tx.expand(VS + 'shapes-1', {}, source);
    expect(found.contains.map((c) => c.code)).not.toContain('hexagon');
    expect(found.contains.find((c) => c.code === 'square')).toMatchObject({
      version: '1.0.0',
      display: 'Square',
    });
  });
});

describe('$expand: inactive and abstract codes', () => {
  it('marks inactive codes (a retired status) and abstract ones (notSelectable)', async () => {
    const found = await tx.expand(VS + 'all-shapes', {}, source);
    const byCode = new Map(found.contains.map((c): [string, SystemCode] => [c.code, c]));
    expect(byCode.get('rhombus')).toMatchObject({ inactive: true });
    expect(byCode.get('shape')).toMatchObject({ abstract: true });
    expect(byCode.get('square')?.inactive).toBeUndefined();
  });

  it('leaves inactive codes out with activeOnly, or when the compose says inactive: false', async () => {
    const active = await tx.expand(VS + 'all-shapes', { activeOnly: true }, source);
    expect(active.contains.map((c) => c.code)).not.toContain('rhombus');
    expect(await codes('active-shapes')).not.toContain('rhombus');
    expect(await codes('citrus')).toEqual(['citrus', 'orange', 'lemon', 'bergamot']);
  });
});

describe('$expand: filters', () => {
  it.each([
    ['polygons', ['polygon', 'triangle', 'square', 'rhombus', 'hexagon']],
    ['polygons-below', ['triangle', 'square', 'rhombus', 'hexagon']],
    ['not-polygons', ['shape', 'round', 'circle', 'ellipse']],
    ['above-square', ['shape', 'polygon', 'square']],
    ['four-sides', ['square', 'rhombus']],
    ['red-or-blue', ['triangle', 'square', 'circle']],
    ['not-red', ['shape', 'polygon', 'square', 'rhombus', 'hexagon', 'round', 'ellipse']],
    ['codes-ending-le', ['triangle', 'circle']],
    ['red-polygons', ['triangle']],
    ['citrus', ['citrus', 'orange', 'lemon', 'bergamot']],
  ])('%s', async (id, expected) => {
    expect(await codes(id)).toEqual(expected);
  });

  it('refuses a pattern that does not compile', async () => {
    expect(await failure(tx.expand(VS + 'bad-regex', {}, source))).toBe('invalid');
  });
});

describe('$expand: excludes and nested value sets', () => {
  it('takes out excluded codes, listed or by value set', async () => {
    expect(await codes('shapes-but-squares')).not.toContain('square');
    expect(await codes('shapes-but-polygons')).toEqual(['shape', 'round', 'circle', 'ellipse']);
  });

  it('joins value sets of separate includes, intersects those of one include', async () => {
    expect(await codes('polygons-and-citrus')).toEqual([
      'polygon',
      'triangle',
      'square',
      'rhombus',
      'hexagon',
      'citrus',
      'orange',
      'lemon',
      'bergamot',
    ]);
    expect(await codes('polygons-red')).toEqual(['triangle', 'square']);
    expect(await codes('square-in-polygons')).toEqual(['square']);
  });

  it('refuses a cycle and an unknown nested value set', async () => {
    expect(await failure(tx.expand(VS + 'cycle-a', {}, source))).toBe('invalid');
    expect(await failure(tx.expand(VS + 'unknown-nested', {}, source))).toBe('not-found');
    expect(await failure(tx.expand(VS + 'nowhere', {}, source))).toBe('not-found');
  });

  it('uses the expansion a value set carries when it has no compose', async () => {
    expect(await codes('stored-expansion')).toEqual(['circle', 'polygon', 'square']);
  });

  it('keeps the displays an enumeration gives', async () => {
    const found = await tx.expand(VS + 'enumerated', {}, source);
    expect(found.contains.map((c) => [c.code, c.display])).toEqual([
      ['circle', 'A circle'],
      ['triangle', 'Triangle'],
    ]);
  });
});

describe('$expand: systems not held', () => {
  it('enumerates listed codes of a system it does not hold', async () => {
    expect(await codes('some-snomed')).toEqual(['22298006']);
  });

  it('refuses a filter on, or the whole of, a system not held, naming it', async () => {
    const error = await tx.expand(VS + 'snomed-isa', {}, source).catch((e: unknown) => e);
    expect(error).toMatchObject({ issueCode: 'not-supported' });
    expect((error as Error).message).toContain('http://snomed.info/sct');
    expect(await failure(tx.expand(VS + 'fragment-colours', {}, source))).toBe('not-supported');
    expect(await failure(tx.expand('http://hl7.org/fhir/ValueSet/observation-codes', {}, source))).toBe(
      'not-supported',
    );
  });
});

describe('$expand: paging and text filter', () => {
  it('pages with offset and count, the total counting every code', async () => {
    const page = await tx.expand(VS + 'all-shapes', { offset: 2, count: 3 }, source);
    expect(page.total).toBe(9);
    expect(page.offset).toBe(2);
    expect(page.contains.map((c) => c.code)).toEqual(['triangle', 'square', 'rhombus']);
    expect(page.resource.expansion).toMatchObject({ total: 9, offset: 2 });
    const parameters = (page.resource.expansion as { parameter: { name: string }[] }).parameter;
    expect(parameters.map((p) => p.name)).toEqual(['offset', 'count', 'used-codesystem']);
  });

  it('filters on words of the display and on the code, without case', async () => {
    const round = await tx.expand(VS + 'all-shapes', { filter: 'ROUND' }, source);
    expect(round.contains.map((c) => c.code)).toEqual(['round']);
    const bySecondWord = await tx.expand(VS + 'citrus', { filter: 'orange' }, source);
    expect(bySecondWord.contains.map((c) => c.code)).toEqual(['orange', 'bergamot']);
    expect((await tx.expand(VS + 'all-shapes', { filter: 'xyz' }, source)).total).toBe(0);
  });

  it('puts designations in when asked', async () => {
    const found = await tx.expand(VS + 'shapes-1', { includeDesignations: true, filter: 'square' }, source);
    const [square] = (found.resource.expansion as { contains: { designation?: unknown[] }[] }).contains;
    expect(square?.designation).toEqual([{ language: 'fr', value: 'Carré' }]);
  });

  it('refuses an expansion past the maximum size unless a page is asked', async () => {
    const small = r4Terminology({ maxExpansionSize: 3 });
    expect(await failure(small.expand(VS + 'all-shapes', {}, source))).toBe('too-costly');
    expect((await small.expand(VS + 'all-shapes', { count: 2 }, source)).contains).toHaveLength(2);
  });
});

describe('$validate-code', () => {
  const validate = (
    request: Parameters<typeof tx.validateCode>[1],
    target: 'ValueSet' | 'CodeSystem' = 'ValueSet',
  ) => tx.validateCode(target, request, source);

  it('accepts a code of the value set, with its display', async () => {
    const result = await validate({
      url: VS + 'polygons',
      system: SHAPES,
      code: 'triangle',
      display: 'triangle',
    });
    expect(result).toMatchObject({ result: true, display: 'Triangle', version: '2.0.0' });
    expect(result.message).toBeUndefined();
  });

  it('refuses a wrong display, naming the right one', async () => {
    const result = await validate({
      url: VS + 'polygons',
      system: SHAPES,
      code: 'square',
      display: 'Square',
    });
    expect(result).toMatchObject({ result: false, display: 'Square (regular)' });
    expect(result.message).toContain('Square (regular)');
  });

  it('takes a designation as a right display', async () => {
    const result = await validate({
      url: VS + 'shapes-1',
      coding: { system: SHAPES, code: 'square', display: 'Carré' },
    });
    expect(result.result).toBe(true);
  });

  it('checks against the version asked', async () => {
    const v1 = await validate(
      { url: SHAPES, code: 'square', display: 'Square', version: '1.0.0' },
      'CodeSystem',
    );
    expect(v1).toMatchObject({ result: true, version: '1.0.0' });
    const hexagon = await validate({ url: SHAPES, code: 'hexagon', version: '1.0.0' }, 'CodeSystem');
    expect(hexagon.result).toBe(false);
    const unknownVersion = await validate({ url: SHAPES, code: 'square', version: '7' }, 'CodeSystem');
    expect(unknownVersion.result).toBe(false);
  });

  it('reports an inactive code as valid and inactive', async () => {
    const result = await validate({ url: VS + 'all-shapes', system: SHAPES, code: 'rhombus' });
    expect(result).toMatchObject({ result: true, inactive: true });
    expect(result.message).toContain('inactive');
    expect((await validate({ url: VS + 'active-shapes', system: SHAPES, code: 'rhombus' })).result).toBe(
      false,
    );
  });

  it('refuses a code outside the value set, an unknown code, an unknown system', async () => {
    expect((await validate({ url: VS + 'polygons', system: SHAPES, code: 'circle' })).result).toBe(false);
    const unknown = await validate({ url: VS + 'polygons', system: SHAPES, code: 'star' });
    expect(unknown).toMatchObject({ result: false });
    expect(unknown.message).toContain('star');
    const noSystem = await validate({ url: VS + 'polygons', system: 'http://example.org/none', code: 'x' });
    expect(noSystem.result).toBe(false);
    expect(noSystem.message).toContain('http://example.org/none');
  });

  it('takes a CodeableConcept as valid when one coding is', async () => {
    const result = await validate({
      url: VS + 'citrus',
      codeableConcept: {
        coding: [
          { system: SHAPES, code: 'square' },
          { system: FRUIT, code: 'LEMON' },
        ],
      },
    });
    expect(result).toMatchObject({ result: true, code: 'lemon', system: FRUIT });
  });

  it('implies the system of a bare code when the value set has one code of it', async () => {
    expect((await validate({ url: VS + 'citrus', code: 'orange' })).result).toBe(true);
  });

  it('validates against a code system not held only by what it lists', async () => {
    const listed = await validate({
      url: VS + 'some-snomed',
      system: 'http://snomed.info/sct',
      code: '22298006',
    });
    expect(listed.result).toBe(true);
    const other = await validate({ url: VS + 'some-snomed', system: 'http://snomed.info/sct', code: '1234' });
    expect(other.result).toBe(false);
  });
});

describe('$lookup', () => {
  const properties = (parameters: FhirResource) =>
    ((parameters.parameter ?? []) as { name: string; part?: { name: string; [k: string]: unknown }[] }[])
      .filter((p) => p.name === 'property')
      .map((p) => [
        p.part?.[0]?.valueCode,
        Object.entries(p.part?.[1] ?? {}).find(([k]) => k.startsWith('value'))?.[1],
      ]);

  it('answers name, version, display, designations and properties', async () => {
    const found = await tx.lookup({ system: SHAPES, code: 'square', version: '1.0.0' }, source);
    expect(found.parameter).toEqual(
      expect.arrayContaining([
        { name: 'name', valueString: 'Shapes' },
        { name: 'version', valueString: '1.0.0' },
        { name: 'display', valueString: 'Square' },
        {
          name: 'designation',
          part: [
            { name: 'language', valueCode: 'fr' },
            { name: 'value', valueString: 'Carré' },
          ],
        },
      ]),
    );
    expect(properties(found)).toEqual([
      ['sides', 4],
      ['colour', 'blue'],
      ['parent', 'polygon'],
      ['inactive', false],
    ]);
  });

  it('answers parents and children, nested or by property', async () => {
    expect(properties(await tx.lookup({ system: SHAPES, code: 'polygon' }, source))).toEqual([
      ['parent', 'shape'],
      ['child', 'triangle'],
      ['child', 'square'],
      ['child', 'rhombus'],
      ['child', 'hexagon'],
      ['inactive', false],
    ]);
    const citrus = properties(
      await tx.lookup({ system: FRUIT, code: 'Citrus', properties: ['parent'] }, source),
    );
    expect(citrus).toEqual([
      ['parent', 'fruit'],
      ['child', 'orange'],
      ['child', 'lemon'],
      ['child', 'bergamot'],
      ['inactive', false],
    ]);
  });

  it('answers only the properties asked, and 404s an unknown code or system', async () => {
    expect(
      properties(await tx.lookup({ system: SHAPES, code: 'square', properties: ['sides'] }, source)),
    ).toContainEqual(['sides', 4]);
    expect(
      properties(await tx.lookup({ system: SHAPES, code: 'square', properties: ['sides'] }, source)),
    ).not.toContainEqual(['colour', 'blue']);
    expect(await failure(tx.lookup({ system: SHAPES, code: 'star' }, source))).toBe('not-found');
    expect(await failure(tx.lookup({ system: 'http://example.org/none', code: 'x' }, source))).toBe(
      'not-found',
    );
    expect(await failure(tx.lookup({ system: 'http://snomed.info/sct', code: '22298006' }, source))).toBe(
      'not-supported',
    );
  });
});

describe('$subsumes', () => {
  it.each([
    ['polygon', 'square', 'subsumes'],
    ['square', 'polygon', 'subsumed-by'],
    ['shape', 'ellipse', 'subsumes'],
    ['square', 'square', 'equivalent'],
    ['square', 'circle', 'not-subsumed'],
  ])('%s and %s: %s', async (codeA, codeB, expected) => {
    expect(await tx.subsumes({ system: SHAPES, codeA, codeB }, source)).toBe(expected);
  });

  it('follows parent properties both ways and refuses an unknown code', async () => {
    expect(await tx.subsumes({ system: FRUIT, codeA: 'fruit', codeB: 'lemon' }, source)).toBe('subsumes');
    expect(await tx.subsumes({ system: FRUIT, codeA: 'lemon', codeB: 'fruit' }, source)).toBe('subsumed-by');
    expect(await failure(tx.subsumes({ system: FRUIT, codeA: 'lemon', codeB: 'kiwi' }, source))).toBe(
      'invalid',
    );
  });
});

describe('hierarchy (:below, :above)', () => {
  it('answers descendants-or-self and ancestors-or-self', async () => {
    const below = await tx.hierarchy(SHAPES, 'polygon', 'below', 100, source);
    expect(below.map((c) => c.code)).toEqual(['polygon', 'triangle', 'square', 'rhombus', 'hexagon']);
    const above = await tx.hierarchy(FRUIT, 'lemon', 'above', 100, source);
    expect(above.map((c) => c.code)).toEqual(['lemon', 'citrus', 'fruit']);
  });

  it('refuses a system not held, an unknown code, more codes than the limit', async () => {
    expect(await failure(tx.hierarchy('http://snomed.info/sct', '1', 'below', 100, source))).toBe(
      'not-found',
    );
    expect(await failure(tx.hierarchy(SHAPES, 'star', 'below', 100, source))).toBe('invalid');
    expect(await failure(tx.hierarchy(SHAPES, 'shape', 'below', 3, source))).toBe('too-costly');
  });
});
