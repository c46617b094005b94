import { describe, expect, it } from 'vitest';
import type { FhirResource } from '../../src/storage/types.js';
import { indexCodeSystem } from '../../src/terminology/code-system-index.js';
import { expandCompose } from '../../src/terminology/expansion.js';
import type { TerminologyResolver } from '../../src/terminology/terminology-scope.js';
import { VS, fixtureResources } from './fixture-source.js';

/** A resolver over the fixtures (the newest version of a url when none is asked). */
function fixtureResolver(): TerminologyResolver {
  const resources = fixtureResources();
  const find = (type: string, url: string, version?: string): FhirResource | undefined =>
    resources
      .filter(
        (r) => r.resourceType === type && r.url === url && (version === undefined || r.version === version),
      )
      .sort((a, b) => String(b.version).localeCompare(String(a.version)))[0];
  return {
    codeSystem: (url, version) => {
      const found = find('CodeSystem', url, version);
      return found && indexCodeSystem(found);
    },
    valueSet: (url, version) => find('ValueSet', url, version),
  };
}

const resolver = fixtureResolver();
const expand = (id: string, lenient = false, limit = 1000) =>
  expandCompose(resolver.valueSet(VS + id)!, resolver, { lenient, limit });

describe('expandCompose', () => {
  it('answers codes, and the systems it read', () => {
    const result = expand('polygons-and-citrus');
    expect(result.codes).toHaveLength(9);
    expect([...result.usedSystems]).toEqual([
      'http://example.org/fhir/CodeSystem/shapes|2.0.0',
      'http://example.org/fhir/CodeSystem/fruit|1',
    ]);
    expect(result).toMatchObject({ openAny: false, openSystems: new Set() });
  });

  it('notes what it cannot enumerate in lenient mode, instead of failing', () => {
    expect(() => expand('snomed-isa')).toThrow(expect.objectContaining({ issueCode: 'not-supported' }));
    expect(expand('snomed-isa', true).openSystems).toEqual(new Set(['http://snomed.info/sct']));
    expect(() => expand('unknown-nested')).toThrow(expect.objectContaining({ issueCode: 'not-found' }));
    expect(expand('unknown-nested', true).openAny).toBe(true);
  });

  it('refuses a listed code its held system lacks, or leaves it out in lenient mode', () => {
    const valueSet: FhirResource = {
      resourceType: 'ValueSet',
      url: 'x',
      compose: {
        include: [
          {
            system: 'http://example.org/fhir/CodeSystem/shapes',
            concept: [{ code: 'star' }, { code: 'circle' }],
          },
        ],
      },
    };
    expect(() => expandCompose(valueSet, resolver, { lenient: false, limit: 10 })).toThrow(
      expect.objectContaining({ issueCode: 'invalid' }),
    );
    expect(expandCompose(valueSet, resolver, { lenient: true, limit: 10 }).codes.map((c) => c.code)).toEqual([
      'circle',
    ]);
  });

  it('stops past the limit', () => {
    expect(() => expand('all-shapes', false, 5)).toThrow(
      expect.objectContaining({ issueCode: 'too-costly' }),
    );
  });

  it('detects a cycle through nested value sets', () => {
    expect(() => expand('cycle-a', true)).toThrow(expect.objectContaining({ issueCode: 'invalid' }));
  });
});
