import { describe, expect, it } from 'vitest';
import { FhirError } from '../../../src/http/http-error.js';
import { operationParams } from '../../../src/fhir/terminology/operation-params.js';
import { terminologyErrorAsFhir } from '../../../src/fhir/terminology/terminology-operations.js';
import { TerminologyError } from '../../../src/terminology/terminology-types.js';

const ACCEPTED = ['url', 'count', 'activeOnly', 'coding', 'valueSet', 'property'];

function failure(fn: () => unknown): { status: number; issueCode: string; expression?: string[] } {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(FhirError);
    const { status, issueCode, expression } = error as FhirError;
    return { status, issueCode, ...(expression ? { expression } : {}) };
  }
  throw new Error('no failure');
}

describe('operationParams', () => {
  it('reads primitives from the query and the body, complex values and resources from the body', () => {
    const params = operationParams(
      '$expand',
      [
        ['url', 'http://a'],
        ['_format', 'json'],
        ['property', 'parent'],
      ],
      {
        resourceType: 'Parameters',
        parameter: [
          { name: 'count', valueInteger: 5 },
          { name: 'activeOnly', valueBoolean: true },
          { name: 'coding', valueCoding: { system: 's', code: 'c' } },
          { name: 'valueSet', resource: { resourceType: 'ValueSet' } },
          { name: 'property', valueCode: 'child' },
        ],
      },
      ACCEPTED,
    );
    expect(params.text('url')).toBe('http://a');
    expect(params.count('count')).toBe(5);
    expect(params.flag('activeOnly')).toBe(true);
    expect(params.complex('coding')).toEqual({ system: 's', code: 'c' });
    expect(params.resource('valueSet', 'ValueSet')).toEqual({ resourceType: 'ValueSet' });
    expect(params.texts('property')).toEqual(['parent', 'child']);
  });

  it('refuses unknown parameters, repeats, bad numbers and flags, and misplaced kinds', () => {
    const query = (pairs: [string, string][]) => operationParams('$expand', pairs, undefined, ACCEPTED);
    expect(failure(() => query([['nope', '1']]))).toMatchObject({ status: 400, issueCode: 'not-supported' });
    const repeated = query([
      ['url', 'a'],
      ['url', 'b'],
    ]);
    expect(failure(() => repeated.text('url'))).toMatchObject({ status: 400, expression: ['url'] });
    for (const value of ['-1', '1.5', 'x', '']) {
      expect(failure(() => query([['count', value]]).count('count'))).toMatchObject({ status: 400 });
    }
    expect(failure(() => query([['activeOnly', 'yes']]).flag('activeOnly'))).toMatchObject({ status: 400 });
    expect(failure(() => query([['coding', 's|c']]).complex('coding'))).toMatchObject({ status: 400 });
    expect(failure(() => query([['valueSet', 'x']]).resource('valueSet', 'ValueSet'))).toMatchObject({
      status: 400,
    });
  });

  it('refuses a body that is not a well-formed Parameters', () => {
    const body = (value: unknown) => () => operationParams('$expand', [], value, ACCEPTED);
    for (const value of [
      { resourceType: 'Patient' },
      null,
      [],
      { resourceType: 'Parameters', parameter: {} },
      { resourceType: 'Parameters', parameter: [{ valueString: 'x' }] },
      { resourceType: 'Parameters', parameter: [{ name: 'url' }] },
      { resourceType: 'Parameters', parameter: [{ name: 'url', valueString: 'a', valueUri: 'b' }] },
      { resourceType: 'Parameters', parameter: [{ name: 'valueSet', resource: 'x' }] },
    ]) {
      expect(failure(body(value)).status, JSON.stringify(value)).toBe(400);
    }
  });
});

describe('terminologyErrorAsFhir', () => {
  it('maps each issue code to its status, and leaves other errors alone', () => {
    const cases = [
      ['not-found', 404],
      ['invalid', 400],
      ['too-costly', 400],
      ['not-supported', 422],
    ] as const;
    for (const [code, status] of cases) {
      const mapped = terminologyErrorAsFhir(new TerminologyError(code, 'x')) as FhirError;
      expect(mapped).toBeInstanceOf(FhirError);
      expect([mapped.status, mapped.issueCode]).toEqual([status, code]);
    }
    const other = new Error('x');
    expect(terminologyErrorAsFhir(other)).toBe(other);
  });
});
