import { InvalidOptionError } from '../errors.js';
import type { PatientCompartment } from './types.js';

/** Options with the patient compartment filled in: what the adapters' factories take. */
export type WithCompartment<T> = T & { compartment: PatientCompartment };

/** Fails fast (a `TypeError` naming the factory) on a value that is not a `PatientCompartment`. */
export function checkPatientCompartment(
  value: unknown,
  factory: string,
): asserts value is PatientCompartment {
  const c = value as Partial<PatientCompartment> | null;
  if (
    typeof c !== 'object' ||
    c === null ||
    !Array.isArray(c.types) ||
    typeof c.params !== 'function' ||
    typeof c.patientIds !== 'function'
  ) {
    throw new InvalidOptionError(
      `${factory}: compartment must be a PatientCompartment ({ types, params, patientIds })`,
    );
  }
}
