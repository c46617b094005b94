import { describe, expect, it } from 'vitest';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import { typesReadByFilters } from '../../src/search/types-read.js';

const typesRead = async (type: string, query: string): Promise<string[]> => {
  const { request } = parseSearchRequest(await loadSearchRegistry(), type, new URLSearchParams(query));
  return typesReadByFilters(request.filters);
};

describe('typesReadByFilters', () => {
  it('lists every type a chain or _has reads, at every depth, once each', async () => {
    expect(await typesRead('Observation', 'code=1&date=ge2020')).toEqual([]);
    expect(await typesRead('Observation', 'subject:Patient.name=a')).toEqual(['Patient']);
    expect(await typesRead('Observation', 'subject.name=a')).toEqual(['Patient', 'Location']);
    expect(await typesRead('Observation', 'subject:Patient.organization.name=a&patient.name=b')).toEqual([
      'Patient',
      'Organization',
    ]);
    expect(
      await typesRead('Patient', '_has:Observation:subject:_has:DiagnosticReport:result:status=final'),
    ).toEqual(['Observation', 'DiagnosticReport']);
    expect(await typesRead('Patient', '_has:Observation:subject:performer:Practitioner.name=x')).toEqual([
      'Observation',
      'Practitioner',
    ]);
  });
});
