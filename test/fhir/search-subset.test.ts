import { describe, expect, it } from 'vitest';
import { entrySubsetter } from '../../src/fhir/search/search-subset.js';
import type { SearchRequest } from '../../src/storage/search-request.js';

const request = (over: Partial<SearchRequest>): SearchRequest => ({
  resourceType: 'Patient',
  filters: [],
  sort: [],
  include: [],
  revinclude: [],
  count: 20,
  offset: 0,
  ...over,
});

describe('entrySubsetter', () => {
  it('renders whole without _summary or _elements', async () => {
    expect(await entrySubsetter(request({}))).toBeUndefined();
    expect(await entrySubsetter(request({ summary: 'false' }))).toBeUndefined();
  });

  it('_summary=data drops text only, keeping primitive extensions', async () => {
    const subset = (await entrySubsetter(request({ summary: 'data' })))!;
    const out = subset(
      {
        resourceType: 'Patient',
        id: 'a',
        text: { status: 'generated' },
        _birthDate: { extension: [] },
        gender: 'other',
      },
      'include',
    );
    expect(out).toEqual({
      resourceType: 'Patient',
      id: 'a',
      _birthDate: { extension: [] },
      gender: 'other',
      meta: {
        tag: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue', code: 'SUBSETTED' }],
      },
    });
  });

  it('_summary=true keeps summary elements and choices of every entry; _elements the matches only', async () => {
    const summary = (await entrySubsetter(request({ resourceType: 'Observation', summary: 'true' })))!;
    const observation = {
      resourceType: 'Observation',
      id: 'o',
      status: 'final',
      code: { text: 'x' },
      valueQuantity: { value: 1 },
      note: [{ text: 'n' }],
    };
    expect(Object.keys(summary(observation, 'match')).sort()).toEqual(
      ['code', 'id', 'meta', 'resourceType', 'status', 'valueQuantity'].sort(),
    );
    const elements = (await entrySubsetter(request({ resourceType: 'Observation', elements: ['note'] })))!;
    expect(Object.keys(elements(observation, 'match')).sort()).toEqual(
      ['code', 'id', 'meta', 'note', 'resourceType', 'status'].sort(),
    );
    expect(elements(observation, 'include')).toBe(observation);
  });
});
