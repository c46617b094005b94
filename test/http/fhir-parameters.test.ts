import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import { readParameters, type ParameterDefinitions } from '../../src/http/fhir-parameters.js';

const DEFS = {
  name: { type: 'string', required: true },
  flag: { type: 'boolean' },
  count: { type: 'integer' },
  tag: { type: 'code', repeats: true },
  link: { type: ['uri', 'url', 'string'] },
} as const satisfies ParameterDefinitions;

function failure(
  body: unknown,
  defs: ParameterDefinitions = DEFS,
): { status: number; issueCode: string; expression?: string[]; message: string } {
  try {
    readParameters(body, defs);
  } catch (error) {
    expect(error).toBeInstanceOf(FhirError);
    const e = error as FhirError;
    return { status: e.status, issueCode: e.issueCode, expression: e.expression, message: e.message };
  }
  throw new Error('expected a failure');
}

const p = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });

describe('readParameters', () => {
  it('reads declared values with their expressions', () => {
    const read = readParameters(
      p(
        { name: 'flag', valueBoolean: false },
        { name: 'name', valueString: 'Alpha' },
        { name: 'tag', valueCode: 'a' },
        { name: 'count', valueInteger: 0 },
        { name: 'tag', valueCode: 'b' },
        { name: 'link', valueUrl: 'https://x.example/a' },
      ),
      DEFS,
    );
    expect(read.name).toEqual({
      value: 'Alpha',
      valueType: 'string',
      index: 1,
      expression: 'Parameters.parameter[1].valueString',
    });
    expect(read.flag?.value).toBe(false);
    expect(read.count?.value).toBe(0);
    expect(read.tag.map((t) => t.value)).toEqual(['a', 'b']);
    expect(read.link?.valueType).toBe('url');
  });

  it('leaves optional parameters undefined and repeating ones empty', () => {
    const read = readParameters(
      { resourceType: 'Parameters', id: 'x', parameter: [{ name: 'name', valueString: 'A' }] },
      DEFS,
    );
    expect(read.flag).toBeUndefined();
    expect(read.tag).toEqual([]);
  });

  it.each([
    ['absent', { resourceType: 'Parameters' }],
    ['empty', p()],
    ['other names only', p({ name: 'flag', valueBoolean: true }, { name: 'unknown', valueString: 'x' })],
  ])('answers the same missing-name error when parameter is %s', (_label, body) => {
    const f = failure(body);
    expect(f).toEqual({
      status: 400,
      issueCode: 'invalid',
      expression: ['Parameters.parameter'],
      message: "Expected required input parameter 'name'",
    });
  });

  it.each([
    ['not an object', 'hello', 'Parameters'],
    ['an array', [], 'Parameters'],
    ['null', null, 'Parameters'],
    ['another resource type', { resourceType: 'Patient' }, 'Parameters.resourceType'],
    ['no resource type', { parameter: [] }, 'Parameters.resourceType'],
    ['an unknown element', { resourceType: 'Parameters', text: {}, parameter: [] }, 'Parameters.text'],
    [
      'parameter not an array',
      { resourceType: 'Parameters', parameter: { name: 'name' } },
      'Parameters.parameter',
    ],
    ['an item not an object', p({ name: 'name', valueString: 'A' }, 3), 'Parameters.parameter[1]'],
    ['an item without name', p({ valueString: 'A' }), 'Parameters.parameter[0].name'],
    ['an item with a blank name', p({ name: ' ', valueString: 'A' }), 'Parameters.parameter[0].name'],
    [
      'an unknown parameter',
      p({ name: 'name', valueString: 'A' }, { name: 'other', valueString: 'x' }),
      'Parameters.parameter[1].name',
    ],
    [
      'a repeated single parameter',
      p({ name: 'name', valueString: 'A' }, { name: 'name', valueString: 'B' }),
      'Parameters.parameter[1]',
    ],
    ['no value', p({ name: 'name' }), 'Parameters.parameter[0]'],
    ['the wrong value type', p({ name: 'name', valueInteger: 3 }), 'Parameters.parameter[0].valueInteger'],
    [
      'two values',
      p({ name: 'name', valueString: 'A', valueCode: 'b' }),
      'Parameters.parameter[0].valueCode',
    ],
    [
      'a resource',
      p({ name: 'name', resource: { resourceType: 'Patient' } }),
      'Parameters.parameter[0].resource',
    ],
    ['parts', p({ name: 'name', part: [] }), 'Parameters.parameter[0].part'],
    ['an empty string', p({ name: 'name', valueString: '' }), 'Parameters.parameter[0].valueString'],
    ['a blank string', p({ name: 'name', valueString: '  ' }), 'Parameters.parameter[0].valueString'],
    ['a number as string', p({ name: 'name', valueString: 3 }), 'Parameters.parameter[0].valueString'],
    [
      'a string as boolean',
      p({ name: 'name', valueString: 'A' }, { name: 'flag', valueBoolean: 'true' }),
      'Parameters.parameter[1].valueBoolean',
    ],
    [
      'a fractional integer',
      p({ name: 'name', valueString: 'A' }, { name: 'count', valueInteger: 1.5 }),
      'Parameters.parameter[1].valueInteger',
    ],
    [
      'a huge integer',
      p({ name: 'name', valueString: 'A' }, { name: 'count', valueInteger: 2 ** 40 }),
      'Parameters.parameter[1].valueInteger',
    ],
    [
      'a code with spaces',
      p({ name: 'name', valueString: 'A' }, { name: 'tag', valueCode: ' a' }),
      'Parameters.parameter[1].valueCode',
    ],
    [
      'a uri with spaces',
      p({ name: 'name', valueString: 'A' }, { name: 'link', valueUri: 'a b' }),
      'Parameters.parameter[1].valueUri',
    ],
  ])('rejects %s', (_label, body, expression) => {
    const f = failure(body);
    expect(f.status).toBe(400);
    expect(f.issueCode).toBe('invalid');
    expect(f.expression).toEqual([expression]);
  });

  it('does not treat inherited property names as declared parameters', () => {
    const f = failure(p({ name: 'name', valueString: 'A' }, { name: 'toString', valueString: 'x' }));
    expect(f.expression).toEqual(['Parameters.parameter[1].name']);
  });

  it('checks positiveInt and unsignedInt bounds', () => {
    const defs = { a: { type: 'positiveInt' }, b: { type: 'unsignedInt' } } as const;
    expect(
      readParameters(p({ name: 'a', valuePositiveInt: 1 }, { name: 'b', valueUnsignedInt: 0 }), defs).a
        ?.value,
    ).toBe(1);
    expect(failure(p({ name: 'a', valuePositiveInt: 0 }), defs).expression).toEqual([
      'Parameters.parameter[0].valuePositiveInt',
    ]);
    expect(failure(p({ name: 'b', valueUnsignedInt: -1 }), defs).expression).toEqual([
      'Parameters.parameter[0].valueUnsignedInt',
    ]);
  });

  it('answers any JSON with values or a 400 FhirError, never anything else', () => {
    const item = fc.record(
      {
        name: fc.oneof(
          fc.constantFrom('name', 'flag', 'count', 'tag', 'link', '__proto__', 'constructor'),
          fc.string(),
        ),
        valueString: fc.oneof(fc.string(), fc.integer()),
        valueBoolean: fc.oneof(fc.boolean(), fc.string()),
        valueInteger: fc.oneof(fc.integer(), fc.double()),
        valueCode: fc.string(),
        part: fc.jsonValue(),
      },
      { requiredKeys: [] },
    );
    const body = fc.oneof(
      fc.jsonValue(),
      fc.record({
        resourceType: fc.constant('Parameters'),
        parameter: fc.oneof(fc.array(item), fc.jsonValue()),
      }),
    );
    fc.assert(
      fc.property(body, (value) => {
        try {
          readParameters(value, DEFS);
        } catch (error) {
          expect(error).toBeInstanceOf(FhirError);
          expect((error as FhirError).status).toBe(400);
          expect((error as FhirError).expression?.length).toBe(1);
        }
      }),
      { numRuns: 500 },
    );
  });
});
