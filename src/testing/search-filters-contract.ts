import { beforeEach, describe, expect, it } from 'vitest';
import {
  typeSearch,
  type CompartmentFilter,
  type ParameterFilter,
  type SearchFilter,
  type SearchRequest,
} from '../storage/search-request.js';
import type { Storage, StorageOperations } from '../storage/types.js';

/**
 * The search filters part of the storage contract: a store answers the whole of
 * `ResourceQuery.search` itself, without a `where` of the caller's (FHIR R4 search on the
 * parameters of the R4 definitions): plain filters its indexes answer exactly or only narrow,
 * chains, `_has`, and the `reach` that bounds what chains and `_has` read (a SMART user's). Called
 * inside `runStorageContract`, which makes a fresh store before each test.
 * @see https://hl7.org/fhir/R4/search.html
 */
export function searchFiltersStorageContract(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  /** Three Patients (two Smiths) and four Observations (`o4` amended), one Patient in another project. */
  async function seed(): Promise<void> {
    const patient = (id: string, family: string) => ({ resourceType: 'Patient', id, name: [{ family }] });
    const observation = (id: string, patientId: string, status: string) => ({
      resourceType: 'Observation',
      id,
      status,
      code: { text: 'weight' },
      subject: { reference: `Patient/${patientId}` },
    });
    await storage.writeResources(
      'p1',
      [
        patient('pa', 'Smith'),
        patient('pb', 'Smithers'),
        patient('pc', 'Jones'),
        observation('o1', 'pa', 'final'),
        observation('o2', 'pb', 'final'),
        observation('o3', 'pc', 'final'),
        observation('o4', 'pa', 'amended'),
      ].map((resource) => ({ op: 'create' as const, resource })),
    );
    await storage.createResource('p2', patient('pa', 'Smith'));
  }

  const ids = async (
    type: string,
    search: SearchRequest,
    ops: Pick<StorageOperations, 'searchResources'> = storage,
  ): Promise<string[]> => {
    const page = await ops.searchResources('p1', type, { search, sort: '_id' });
    expect(page.total).toBe(page.resources.length);
    return page.resources.map((r) => r.id);
  };

  describe('search filters without where', () => {
    it('answers plain filters, exact or only narrowed by its indexes', async () => {
      await seed();
      expect(await ids('Patient', typeSearch('Patient', [NAME_SMI]))).toEqual(['pa', 'pb']);
      expect(await ids('Observation', typeSearch('Observation', [status('final', 'not')]))).toEqual(['o4']);
      expect(await ids('Observation', typeSearch('Observation', [status('final'), subject('pa')]))).toEqual([
        'o1',
      ]);
      // Inside a transaction too.
      await storage.transaction(async (tx) => {
        expect(await ids('Patient', typeSearch('Patient', [NAME_SMI]), tx)).toEqual(['pa', 'pb']);
      });
    });

    it('answers a chain and a _has, alone and with other filters', async () => {
      await seed();
      expect(await ids('Observation', typeSearch('Observation', [SUBJECT_NAMED_SMI]))).toEqual([
        'o1',
        'o2',
        'o4',
      ]);
      expect(
        await ids('Observation', typeSearch('Observation', [SUBJECT_NAMED_SMI, status('amended')])),
      ).toEqual(['o4']);
      expect(await ids('Patient', typeSearch('Patient', [hasObservation('amended')]))).toEqual(['pa']);
      expect(await ids('Patient', typeSearch('Patient', [hasObservation('final'), NAME_SMI]))).toEqual([
        'pa',
        'pb',
      ]);
      expect(await ids('Patient', typeSearch('Patient', [hasObservation('cancelled')]))).toEqual([]);
    });

    it('keeps chains and _has within the search reach', async () => {
      await seed();
      const only = (type: string, ...patients: string[]): Record<string, CompartmentFilter> => ({
        [type]: { compartment: 'Patient', ids: patients },
      });
      const reaching = (type: string, filters: SearchFilter[], reach: Record<string, CompartmentFilter>) =>
        ids(type, { ...typeSearch(type, filters), reach });
      // Only `pb` is reached: the Observations of the other Smith do not match through it.
      expect(await reaching('Observation', [SUBJECT_NAMED_SMI], only('Patient', 'pb'))).toEqual(['o2']);
      expect(await reaching('Observation', [SUBJECT_NAMED_SMI], only('Patient'))).toEqual([]);
      // A type the reach does not list is not bounded.
      expect(await reaching('Observation', [SUBJECT_NAMED_SMI], only('Organization'))).toEqual([
        'o1',
        'o2',
        'o4',
      ]);
      // Only `pc`'s Observations are reached: `pa`'s amended one does not reveal `pa`.
      expect(await reaching('Patient', [hasObservation('amended')], only('Observation', 'pc'))).toEqual([]);
      expect(await reaching('Patient', [hasObservation('final')], only('Observation', 'pc'))).toEqual(['pc']);
    });
  });
}

/** `name=smi` (a Patient's family name starts with "smi"). */
const NAME_SMI: ParameterFilter = {
  kind: 'parameter',
  code: 'name',
  type: 'string',
  values: [{ type: 'string', value: 'smi', normalized: 'smi' }],
};

/** `subject:Patient.name=smi`. */
const SUBJECT_NAMED_SMI: SearchFilter = {
  kind: 'chain',
  code: 'subject',
  targetTypes: ['Patient'],
  filter: NAME_SMI,
};

/** `status=<code>` (or `status:not=<code>`). */
function status(code: string, modifier?: 'not'): ParameterFilter {
  return {
    kind: 'parameter',
    code: 'status',
    type: 'token',
    ...(modifier ? { modifier } : {}),
    values: [{ type: 'token', code }],
  };
}

/** `subject=Patient/<id>`. */
function subject(id: string): ParameterFilter {
  return {
    kind: 'parameter',
    code: 'subject',
    type: 'reference',
    values: [{ type: 'reference', resourceType: 'Patient', id }],
  };
}

/** `_has:Observation:subject:status=<code>`. */
function hasObservation(code: string): SearchFilter {
  return { kind: 'has', resourceType: 'Observation', referenceParam: 'subject', filter: status(code) };
}
