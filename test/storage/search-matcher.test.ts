import { describe, expect, it } from 'vitest';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import { createMemoryStorage } from '../../src/storage/memory.js';
import { idFilter, typeSearch, type ParameterFilter } from '../../src/storage/search-request.js';
import { memoryStorage } from '../../src/stores.js';

// The matcher of the embedded stores (`ResourceIndexer.compileFilters`, or the store's own): what
// tests the filters their postings do not answer exactly. Without any, a store refuses such a
// search rather than answering a superset.

const GENDER_MALE: ParameterFilter = {
  kind: 'parameter',
  code: 'gender',
  type: 'token',
  values: [{ type: 'token', code: 'male' }],
};

const seed = async (storage: ReturnType<typeof memoryStorage>) => {
  await storage.createResource('p', { resourceType: 'Patient', id: 'a', gender: 'male' });
  await storage.createResource('p', { resourceType: 'Patient', id: 'b', gender: 'female' });
};

describe('the embedded stores matcher', () => {
  it('answers filters with indexer: false (the R4 matcher the factories give)', async () => {
    const storage = memoryStorage({ indexer: false });
    await seed(storage);
    const page = await storage.searchResources('p', 'Patient', {
      search: typeSearch('Patient', [GENDER_MALE]),
    });
    expect(page.resources.map((r) => r.id)).toEqual(['a']);
  });

  it('refuses filters it cannot answer when built with neither indexer nor matcher', async () => {
    const storage = createMemoryStorage({ compartment: R4_PATIENT_COMPARTMENT });
    await seed(storage);
    await expect(
      storage.searchResources('p', 'Patient', { search: typeSearch('Patient', [GENDER_MALE]) }),
    ).rejects.toMatchObject({ code: 'ERR_INTERNAL' });
    // What every store answers from what it keeps of each version needs no matcher.
    const byId = await storage.searchResources('p', 'Patient', {
      search: typeSearch('Patient', [idFilter(['b'])]),
    });
    expect(byId.resources.map((r) => r.id)).toEqual(['b']);
  });
});
