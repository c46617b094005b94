import { describe, expect, it } from 'vitest';
import { indexCodeSystem } from '../../src/terminology/code-system-index.js';
import { filterConcepts, type ComposeFilter } from '../../src/terminology/compose-filters.js';
import { fixture } from './fixture-source.js';

const shapes = indexCodeSystem(fixture('codesystem-shapes-2.json'));
const codes = (...filters: ComposeFilter[]) => filterConcepts(shapes, filters).map((c) => c.code);

describe('filterConcepts', () => {
  it('is-a, descendent-of, is-not-a, generalizes', () => {
    expect(codes({ property: 'concept', op: 'is-a', value: 'round' })).toEqual([
      'round',
      'circle',
      'ellipse',
    ]);
    expect(codes({ property: 'concept', op: 'descendent-of', value: 'round' })).toEqual([
      'circle',
      'ellipse',
    ]);
    expect(codes({ property: 'concept', op: 'is-not-a', value: 'polygon' })).toEqual([
      'shape',
      'round',
      'circle',
      'ellipse',
    ]);
    expect(codes({ property: 'concept', op: 'generalizes', value: 'circle' })).toEqual([
      'shape',
      'round',
      'circle',
    ]);
    expect(codes({ property: 'concept', op: 'is-a', value: 'nothing' })).toEqual([]);
  });

  it('= and in on a property, on the code, on the parent', () => {
    expect(codes({ property: 'sides', op: '=', value: '6' })).toEqual(['hexagon']);
    expect(codes({ property: 'code', op: 'in', value: 'circle, square' })).toEqual(['square', 'circle']);
    expect(codes({ property: 'parent', op: '=', value: 'round' })).toEqual(['circle', 'ellipse']);
    expect(codes({ property: 'display', op: '=', value: 'Ellipse' })).toEqual(['ellipse']);
    expect(codes({ property: 'inactive', op: '=', value: 'true' })).toEqual(['rhombus']);
  });

  it('regex matches the whole value; exists tests a property', () => {
    expect(codes({ property: 'code', op: 'regex', value: '[a-z]{6}' })).toEqual(['square', 'circle']);
    expect(codes({ property: 'code', op: 'regex', value: 'squ' })).toEqual([]);
    expect(codes({ property: 'colour', op: 'exists', value: 'true' })).toEqual([
      'triangle',
      'square',
      'circle',
    ]);
  });

  it('refuses an unknown operator and a bad pattern', () => {
    expect(() => codes({ property: 'code', op: 'near', value: 'x' })).toThrow(
      expect.objectContaining({ issueCode: 'not-supported' }),
    );
    expect(() => codes({ property: 'code', op: 'regex', value: '(' })).toThrow(
      expect.objectContaining({ issueCode: 'invalid' }),
    );
  });

  it('runs patterns on a linear-time engine: no backreference, no pattern past 1,000 characters', () => {
    // A backtracking engine accepts `\1`; RE2 has no backreferences, and no catastrophic patterns.
    expect(() => codes({ property: 'code', op: 'regex', value: '(s)\\1' })).toThrow(
      expect.objectContaining({ issueCode: 'invalid' }),
    );
    expect(codes({ property: 'code', op: 'regex', value: '(s|sq|u|a|r|e)+' })).toEqual(['square']);
    expect(() => codes({ property: 'code', op: 'regex', value: 'a'.repeat(1001) })).toThrow(
      expect.objectContaining({ issueCode: 'invalid' }),
    );
  });
});
