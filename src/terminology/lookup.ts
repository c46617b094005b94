import type { FhirResource } from '../storage/types.js';
import { closure, findConcept, type CodeSystemIndex, type Concept } from './code-system-index.js';
import { TerminologyError, type Subsumption } from './terminology-types.js';

/** The properties every answer has, from the links and status the index derived. */
const DERIVED = new Set(['parent', 'child', 'inactive']);

/**
 * The `$lookup` answer for `concept` of `system`: a `Parameters` resource with `name`, `version`,
 * `display`, each `designation`, and a `property` entry for each of the concept's own properties
 * asked (every one when none is named) and for its `parent`, `child` and `inactive` status.
 * @see https://hl7.org/fhir/R4/codesystem-operation-lookup.html
 */
export function lookupParameters(
  system: CodeSystemIndex,
  concept: Concept,
  properties?: readonly string[],
): FhirResource {
  const asked = properties && properties.length > 0 ? new Set(properties) : undefined;
  const parameter: Record<string, unknown>[] = [{ name: 'name', valueString: system.name ?? system.url }];
  if (system.version !== undefined) parameter.push({ name: 'version', valueString: system.version });
  if (concept.display !== undefined) parameter.push({ name: 'display', valueString: concept.display });
  for (const designation of concept.designations ?? []) parameter.push(designationParameter(designation));
  for (const property of concept.properties ?? []) {
    if (asked && !asked.has(property.code)) continue;
    if (DERIVED.has(property.code)) continue; // listed below, once
    parameter.push(propertyParameter(property.code, { [property.key]: property.value }));
  }
  for (const code of concept.parents) parameter.push(propertyParameter('parent', { valueCode: code }));
  for (const code of concept.children) parameter.push(propertyParameter('child', { valueCode: code }));
  parameter.push(propertyParameter('inactive', { valueBoolean: concept.inactive }));
  return { resourceType: 'Parameters', parameter };
}

function designationParameter(
  designation: NonNullable<Concept['designations']>[number],
): Record<string, unknown> {
  const part: Record<string, unknown>[] = [];
  if (designation.language) part.push({ name: 'language', valueCode: designation.language });
  if (designation.use) part.push({ name: 'use', valueCoding: designation.use });
  part.push({ name: 'value', valueString: designation.value });
  return { name: 'designation', part };
}

function propertyParameter(code: string, value: Record<string, unknown>): Record<string, unknown> {
  const [key, inner] = Object.entries(value)[0]!;
  return {
    name: 'property',
    part: [
      { name: 'code', valueCode: code },
      { name: 'value', [key]: inner },
    ],
  };
}

/**
 * How `codeA` and `codeB` of `system` relate by `is-a`: `invalid` for a code the system lacks.
 * @see https://hl7.org/fhir/R4/codesystem-operation-subsumes.html
 */
export function subsumption(system: CodeSystemIndex, codeA: string, codeB: string): Subsumption {
  const a = findConcept(system, codeA);
  const b = findConcept(system, codeB);
  for (const [code, concept] of [
    [codeA, a],
    [codeB, b],
  ] as const) {
    if (!concept)
      throw new TerminologyError('invalid', `The code '${code}' is not in the code system ${system.url}`);
  }
  if (a!.code === b!.code) return 'equivalent';
  if (!system.isA) return 'not-subsumed';
  if (closure(system, a!.code, 'down').includes(b!.code)) return 'subsumes';
  if (closure(system, b!.code, 'down').includes(a!.code)) return 'subsumed-by';
  return 'not-subsumed';
}
