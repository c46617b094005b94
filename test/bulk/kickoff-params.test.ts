import { describe, expect, it } from 'vitest';
import {
  parseKickoff,
  parsePrefer,
  SINCE_CLOCK_SKEW_MS,
  type KickoffInput,
} from '../../src/bulk/kickoff-params.js';
import { FhirError } from '../../src/http/http-error.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';

const registry = await loadSearchRegistry();

const input = (query: Record<string, unknown>, extra: Partial<KickoffInput> = {}): KickoffInput => ({
  registry,
  level: 'system',
  method: 'GET',
  query,
  ...extra,
});

function status(fn: () => unknown): number | undefined {
  try {
    fn();
    return undefined;
  } catch (error) {
    return error instanceof FhirError ? error.status : -1;
  }
}

describe('parsePrefer', () => {
  it('reads handling from a comma list and ignores other preferences', () => {
    expect(parsePrefer('respond-async, handling=lenient')).toEqual({
      handling: 'lenient',
      respondAsync: true,
    });
    expect(parsePrefer('handling=strict,respond-async')).toEqual({ handling: 'strict', respondAsync: true });
    expect(parsePrefer('return=minimal')).toEqual({});
    expect(parsePrefer(undefined)).toEqual({});
    expect(parsePrefer('handling=maybe').invalid).toBe('handling=maybe');
  });
});

describe('parseKickoff', () => {
  it('defaults', () => {
    expect(parseKickoff(input({}))).toEqual({
      params: { level: 'system', outputFormat: 'application/fhir+ndjson', lenient: false },
      issues: [],
    });
  });

  it('_type merges comma lists and repeats, without duplicates', () => {
    const { params } = parseKickoff(input({ _type: ['Patient,Observation', 'Patient', ' Condition '] }));
    expect(params.types).toEqual(['Patient', 'Observation', 'Condition']);
    expect(parseKickoff(input({ _type: '' })).params.types).toBeUndefined();
    expect(parseKickoff(input({ _type: 'Nope' }, { prefer: 'handling=lenient' })).params.types).toEqual([]);
  });

  it('_since: FHIR instants only; a space stands for an unencoded +', () => {
    const { params } = parseKickoff(input({ _since: '2024-01-02T03:04:05.123 02:00' }));
    expect(params.since).toBe('2024-01-02T03:04:05.123+02:00');
    expect(params.sinceMs).toBe(Date.parse('2024-01-02T01:04:05.123Z'));
    for (const bad of ['2024-01-02', '2024-01-02T03:04:05', 'now', '2024-13-01T00:00:00Z']) {
      expect(status(() => parseKickoff(input({ _since: bad })))).toBe(400);
    }
    expect(
      status(() => parseKickoff(input({ _since: ['2024-01-02T03:04:05Z', '2024-01-02T03:04:05Z'] }))),
    ).toBe(400);
  });

  it('_since in the future is a 400, even under lenient handling; a small clock skew is allowed', () => {
    const now = Date.parse('2030-01-01T00:00:00Z');
    const at = (offsetMs: number) => new Date(now + offsetMs).toISOString();
    for (const prefer of [undefined, 'handling=lenient', 'respond-async, handling=strict']) {
      expect(status(() => parseKickoff(input({ _since: '2057-01-01T00:00:00+05:00' }, { prefer })))).toBe(
        400,
      );
      expect(
        status(() => parseKickoff(input({ _since: at(SINCE_CLOCK_SKEW_MS + 1000) }, { now, prefer }))),
      ).toBe(400);
    }
    let error: unknown;
    try {
      parseKickoff(input({ _since: at(60_000) }, { now, prefer: 'handling=lenient' }));
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(FhirError);
    expect((error as FhirError).issueCode).toBe('invalid');
    expect((error as FhirError).expression).toEqual(['_since']);
    expect(parseKickoff(input({ _since: at(SINCE_CLOCK_SKEW_MS - 1000) }, { now })).params.sinceMs).toBe(
      now + SINCE_CLOCK_SKEW_MS - 1000,
    );
    expect(parseKickoff(input({ _since: at(-1000) }, { now })).params.sinceMs).toBe(now - 1000);
    // POST: the same check on a Parameters body.
    const body = { resourceType: 'Parameters', parameter: [{ name: '_since', valueInstant: at(3_600_000) }] };
    expect(
      status(() => parseKickoff(input({}, { level: 'group', groupId: 'g', method: 'POST', body, now }))),
    ).toBe(400);
  });

  it('includeAssociatedData: both IG values, comma-separated or repeated, each once', () => {
    const { params, issues } = parseKickoff(
      input({
        includeAssociatedData: [
          'LatestProvenanceResources,RelevantProvenanceResources',
          'LatestProvenanceResources',
        ],
      }),
    );
    expect(params.associatedData).toEqual(['LatestProvenanceResources', 'RelevantProvenanceResources']);
    expect(issues).toEqual([]);
    expect(
      status(() => parseKickoff(input({ includeAssociatedData: 'LatestProvenanceResources,Nope' }))),
    ).toBe(400);
    expect(status(() => parseKickoff(input({ includeAssociatedData: '_custom' })))).toBe(400);
    const lenient = parseKickoff(
      input({ includeAssociatedData: 'Nope,RelevantProvenanceResources' }, { prefer: 'handling=lenient' }),
    );
    expect(lenient.params.associatedData).toEqual(['RelevantProvenanceResources']);
    expect(lenient.issues.map((i) => [i.code, i.expression[0]])).toEqual([
      ['not-supported', 'includeAssociatedData'],
    ]);
  });

  it('requireAsyncHeaders: Accept and Prefer: respond-async are required, whatever the handling', () => {
    const code = (extra: Partial<KickoffInput>): string | undefined => {
      try {
        parseKickoff(input({}, { requireAsyncHeaders: true, ...extra }));
        return undefined;
      } catch (error) {
        return `${(error as FhirError).status} ${(error as FhirError).issueCode} ${(error as FhirError).expression?.join()}`;
      }
    };
    expect(code({ accept: 'application/fhir+json', prefer: 'respond-async' })).toBeUndefined();
    expect(
      code({ accept: 'application/fhir+json', prefer: 'handling=lenient, respond-async' }),
    ).toBeUndefined();
    expect(code({ accept: 'application/fhir+json' })).toBe('400 required Prefer');
    expect(code({ accept: 'application/fhir+json', prefer: 'handling=lenient' })).toBe('400 required Prefer');
    expect(code({ prefer: 'respond-async' })).toBe('400 required Accept');
    // Off (the default): neither is needed.
    expect(status(() => parseKickoff(input({})))).toBeUndefined();
  });

  it('POST Parameters: values of any string type and references', () => {
    const { params } = parseKickoff(
      input(
        {},
        {
          level: 'group',
          groupId: 'g',
          method: 'POST',
          body: {
            resourceType: 'Parameters',
            parameter: [
              { name: '_since', valueInstant: '2024-01-02T03:04:05Z' },
              { name: '_type', valueString: 'Patient' },
              { name: 'patient', valueReference: { reference: 'Patient/a' } },
              { name: 'patient', valueReference: { reference: 'https://x.org/fhir/Patient/b' } },
              { name: '_outputFormat', valueString: 'ndjson' },
            ],
          },
        },
      ),
    );
    expect(params).toMatchObject({ level: 'group', groupId: 'g', types: ['Patient'], patients: ['a', 'b'] });
    for (const body of [
      { resourceType: 'Patient' },
      { resourceType: 'Parameters', parameter: {} },
      { resourceType: 'Parameters', parameter: [{ valueString: 'x' }] },
      { resourceType: 'Parameters', parameter: [{ name: '_type', valueInteger: 1 }] },
      {
        resourceType: 'Parameters',
        parameter: [{ name: 'patient', valueReference: { reference: 'Group/1' } }],
      },
      null,
    ]) {
      expect(status(() => parseKickoff(input({}, { level: 'patient', method: 'POST', body })))).toBe(400);
    }
  });

  it('every problem is a 400 in strict mode and an issue in lenient mode', () => {
    const bad: Record<string, string> = {
      _outputFormat: 'application/json',
      _type: 'Nope',
      _elements: 'a.b.c',
      _typeFilter: 'Observation?unknown-param=1',
      includeAssociatedData: 'AllTheThings',
      _bogus: 'x',
    };
    for (const [name, value] of Object.entries(bad)) {
      expect(
        status(() => parseKickoff(input({ [name]: value }))),
        name,
      ).toBe(400);
      const lenient = parseKickoff(input({ [name]: value }, { prefer: 'handling=lenient' }));
      expect(lenient.params.lenient).toBe(true);
      expect(
        lenient.issues.map((i) => i.expression[0]),
        name,
      ).toEqual([name]);
    }
    expect(status(() => parseKickoff(input({ patient: 'Patient/1' }, { level: 'patient' })))).toBe(400);
    expect(status(() => parseKickoff(input({}, { accept: 'text/html' })))).toBe(400);
    expect(status(() => parseKickoff(input({}, { accept: 'application/fhir+json' })))).toBeUndefined();
    expect(status(() => parseKickoff(input({ _type: { a: 1 } })))).toBe(400);
  });

  it('_elements and _typeFilter are kept as given, _typeFilter parsed too', () => {
    const { params } = parseKickoff(
      input({
        _elements: 'Patient.name,id',
        _typeFilter: ['Observation%3F_id%3Do1'.replace(/%3F/g, '?').replace(/%3D/g, '=')],
      }),
    );
    expect(params.elements).toEqual(['Patient.name', 'id']);
    expect(params.typeFilters).toEqual(['Observation?_id=o1']);
    expect(params.typeFilterSearches).toEqual([
      {
        resourceType: 'Observation',
        filters: [{ kind: 'parameter', code: '_id', type: 'token', values: [{ type: 'token', code: 'o1' }] }],
      },
    ]);
    // Plain data: it is kept with the job and crosses to the worker thread unchanged.
    expect(structuredClone(params)).toEqual(params);
  });

  it('_typeFilter: every search parameter of the type; several filters, one entry each', () => {
    const { params } = parseKickoff(
      input({
        _typeFilter: [
          'Observation?code=1234',
          `Observation?${new URLSearchParams({ category: 'laboratory', date: 'ge2020-01', 'value-quantity': 'gt5' }).toString()}`,
          `Patient?${new URLSearchParams({ name: 'smith', gender: 'female,other' }).toString()}`,
          `Condition?${new URLSearchParams({ 'code:not': 'http://snomed.info/sct|1', 'onset-date:missing': 'false' }).toString()}`,
        ],
      }),
    );
    expect(
      params.typeFilterSearches?.map((s) => [
        s.resourceType,
        s.filters.map((f) => (f.kind === 'has' ? '_has' : f.code)),
      ]),
    ).toEqual([
      ['Observation', ['code']],
      ['Observation', ['category', 'date', 'value-quantity']],
      ['Patient', ['name', 'gender']],
      ['Condition', ['code', 'onset-date']],
    ]);
  });

  it('_typeFilter: chains and _has are parsed, for the kick-off to resolve', () => {
    const { params } = parseKickoff(
      input({
        _typeFilter: [
          'Observation?subject:Patient.general-practitioner:Practitioner.name=doe',
          'Patient?_has:Observation:patient:code=1234',
        ],
      }),
    );
    const [chain, has] = params.typeFilterSearches!.map((s) => s.filters[0]!);
    expect(chain).toMatchObject({
      kind: 'chain',
      code: 'subject',
      targetTypes: ['Patient'],
      filter: { kind: 'chain', code: 'general-practitioner', targetTypes: ['Practitioner'] },
    });
    expect(has).toMatchObject({ kind: 'has', resourceType: 'Observation', referenceParam: 'patient' });
  });

  it('_typeFilter: result parameters, unknown parameters and empty values are refused', () => {
    for (const filter of [
      'Observation?_sort=date',
      'Observation?_include=Observation:subject',
      'Observation?_revinclude=Provenance:target',
      'Observation?_count=5',
      'Observation?_summary=count',
      'Observation?_elements=code',
      'Observation?nope=1',
      'Observation?subject:Patient.nope=1',
      'Observation?code:in=http://x',
      'Observation?code=',
      'Observation?date=notadate',
      'Nope?_id=1',
    ]) {
      let error: unknown;
      try {
        parseKickoff(input({ _typeFilter: filter }));
      } catch (e) {
        error = e;
      }
      expect(error, filter).toBeInstanceOf(FhirError);
      expect((error as FhirError).status, filter).toBe(400);
      expect((error as FhirError).expression, filter).toEqual(['_typeFilter']);
      const lenient = parseKickoff(input({ _typeFilter: filter }, { prefer: 'handling=lenient' }));
      expect(lenient.params.typeFilters, filter).toBeUndefined();
      expect(
        lenient.issues.map((i) => i.expression[0]),
        filter,
      ).toEqual(['_typeFilter']);
    }
  });
});
