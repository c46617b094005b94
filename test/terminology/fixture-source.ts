import fs from 'node:fs';
import type { FhirResource } from '../../src/storage/types.js';
import type { TerminologySource } from '../../src/terminology/terminology-types.js';
import { compareVersions } from '../../src/terminology/version-order.js';

const FIXTURES = new URL('./fixtures/', import.meta.url);

/** One fixture file, parsed. */
export function fixture(name: string): FhirResource {
  return JSON.parse(fs.readFileSync(new URL(name, FIXTURES), 'utf8')) as FhirResource;
}

/** Every fixture CodeSystem and ValueSet. */
export function fixtureResources(): FhirResource[] {
  const codeSystems = fs
    .readdirSync(FIXTURES)
    .filter((name) => name.startsWith('codesystem-'))
    .map(fixture);
  const bundle = fixture('valuesets.json') as { entry?: { resource: FhirResource }[] };
  return [...codeSystems, ...(bundle.entry ?? []).map((e) => e.resource)];
}

/** A project's source over `resources` held in memory, counting its reads. */
export function fixtureSource(
  resources: FhirResource[] = fixtureResources(),
  key = 'fixture-project',
): TerminologySource & { reads: number } {
  const source = {
    key,
    reads: 0,
    find(type: 'CodeSystem' | 'ValueSet', url: string, version?: string) {
      source.reads++;
      const matches = resources.filter(
        (r) => r.resourceType === type && r.url === url && (version === undefined || r.version === version),
      );
      matches.sort((a, b) =>
        compareVersions(b.version as string | undefined, a.version as string | undefined),
      );
      return Promise.resolve(matches[0]);
    },
  };
  return source;
}

export const SHAPES = 'http://example.org/fhir/CodeSystem/shapes';
export const FRUIT = 'http://example.org/fhir/CodeSystem/fruit';
export const VS = 'http://example.org/fhir/ValueSet/';
