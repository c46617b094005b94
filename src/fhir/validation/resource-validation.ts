import { FhirOutcomeError, type OutcomeIssue } from '../../http/outcome.js';
import type { FhirResource } from '../../storage/types.js';
import type { Terminology, TerminologySource } from '../../terminology/terminology-types.js';
import { createBindingCheck } from './binding-check.js';
import { BindingTable } from './binding-table.js';
import { inheritedNameIssues } from './inherited-names.js';
import { loadMedplumR4 } from './medplum-r4.js';
import { clearedByFastPath, type ResourceValidator } from './structure-validator.js';

/** How a write is validated: the project's mode, and whether anyone will read the warnings. */
export interface WriteValidationMode {
  /** The project is strict: errors refuse the write. */
  strict: boolean;
  /** The answer shows the warnings (`Prefer: return=OperationOutcome`): compute them. */
  warnings: boolean;
}

/** The checks of a resource beyond the basic ones of resource-checks.ts: structure and bindings. */
export interface ResourceValidation {
  /**
   * The checks of a write: in a strict project, the structure (its fast path first) and the
   * bindings, a 400 `FhirOutcomeError` with every issue when one is an error; in a lenient project,
   * the bindings only when `mode.warnings`, every finding as a warning. Answers the warnings when
   * `mode.warnings` (else nothing).
   */
  write(
    resource: FhirResource,
    mode: WriteValidationMode,
    source: TerminologySource,
  ): Promise<OutcomeIssue[]>;
  /** Every issue of `resource` at full strictness (`$validate`): names, structure, bindings. */
  issues(resource: FhirResource, source: TerminologySource): Promise<OutcomeIssue[]>;
}

const isError = (issue: OutcomeIssue): boolean => issue.severity === 'error' || issue.severity === 'fatal';

/**
 * The validation of writes and of `$validate` over `validator` (the router's structure validator)
 * and the binding checks of `terminology` (validation/binding-check.ts). The binding table and the
 * terminology load on the first resource that needs them, so lenient projects never pay for them
 * unless someone asks for the warnings.
 * @see https://hl7.org/fhir/R4/validation.html
 */
export function resourceValidation(
  validator: ResourceValidator,
  terminology: Terminology,
): ResourceValidation {
  let loading: Promise<ReturnType<typeof createBindingCheck>> | undefined;
  const bindingCheck = (): Promise<ReturnType<typeof createBindingCheck>> =>
    (loading ??= (async () => {
      const [r4] = await Promise.all([loadMedplumR4(), terminology.load()]);
      return createBindingCheck(new BindingTable(r4.core), terminology);
    })().catch((error: unknown) => {
      loading = undefined; // retried by the next write rather than failing forever
      throw error;
    }));
  const bindings = async (resource: FhirResource, source: TerminologySource): Promise<OutcomeIssue[]> =>
    (await bindingCheck())(resource, source);

  const structure = async (resource: FhirResource): Promise<OutcomeIssue[]> => {
    if (clearedByFastPath(validator, resource)) return [];
    // Checked here, not left to the validator: the default one does not see these names.
    const inherited = inheritedNameIssues(resource);
    return inherited.length > 0 ? inherited : validator(resource);
  };

  return {
    async write(resource, mode, source) {
      if (!mode.strict) {
        if (!mode.warnings) return [];
        return (await bindings(resource, source)).map((issue) => ({ ...issue, severity: 'warning' }));
      }
      const issues = [...(await structure(resource)), ...(await bindings(resource, source))];
      if (issues.some(isError)) throw new FhirOutcomeError(400, issues);
      return mode.warnings ? issues : [];
    },
    async issues(resource, source) {
      return [
        ...inheritedNameIssues(resource),
        ...(await validator(resource)),
        ...(await bindings(resource, source)),
      ];
    },
  };
}
