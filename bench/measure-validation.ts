import { r4StructureValidator, referenceR4Validator } from '../src/fhir/validation/structure-validator.js';
import type { FhirResource } from '../src/storage/types.js';
import { median, now } from './stats.js';

/** Strict validation alone, both validators on the same resources, side by side in each repetition. */
export interface ValidationFigures {
  /** Resources validated per repetition (a sample of the input, every n-th resource). */
  resources: number;
  /** `@medplum/core`'s `validateResource` and the shape check: the strict validator without the fast path. */
  referenceMs: number[];
  /** The default validator (`r4StructureValidator()`), one pass over the sample. */
  defaultMs: number[];
  /** `JSON.parse` of the same resources' JSON text, one pass: the yardstick of an upload line. */
  parseMs: number[];
  /** Resources the reference or the default validator found an error in (0 on valid data). */
  invalid: number;
}

/**
 * Times the default strict validator against `@medplum/core` alone (and `JSON.parse`) on every n-th
 * of `resources`, at most `sampleSize` of them, in-process. Each repetition runs the three side by
 * side; the fast ones loop over the sample several times so that a timing lasts long enough.
 */
export async function measureValidation(
  resources: readonly FhirResource[],
  reps: number,
  sampleSize = 2000,
): Promise<ValidationFigures> {
  const step = Math.max(1, Math.ceil(resources.length / sampleSize));
  const sample = resources.filter((_, i) => i % step === 0);
  const lines = sample.map((r) => JSON.stringify(r));
  const reference = referenceR4Validator();
  const fast = r4StructureValidator();
  let invalid = 0;
  const hasError = (issues: { severity: string }[]) => issues.some((i) => i.severity === 'error');
  // Loads both (the definitions, once per process) and warms them up; counts the invalid ones.
  for (const resource of sample) {
    if (hasError(await reference(resource)) || hasError(await fast(resource))) invalid++;
  }
  const loops = 10;
  const result: ValidationFigures = {
    resources: sample.length,
    referenceMs: [],
    defaultMs: [],
    parseMs: [],
    invalid,
  };
  for (let rep = 0; rep < reps; rep++) {
    let start = now();
    for (const resource of sample) await reference(resource);
    result.referenceMs.push(now() - start);
    start = now();
    for (let loop = 0; loop < loops; loop++) for (const resource of sample) await fast(resource);
    result.defaultMs.push((now() - start) / loops);
    start = now();
    for (let loop = 0; loop < loops; loop++) for (const line of lines) JSON.parse(line);
    result.parseMs.push((now() - start) / loops);
  }
  return result;
}

/** Resources per second of a median timing. */
export const rate = (resources: number, ms: readonly number[]): number => resources / (median(ms) / 1000);
