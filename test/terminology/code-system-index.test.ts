import { describe, expect, it } from 'vitest';
import { closure, findConcept, indexCodeSystem } from '../../src/terminology/code-system-index.js';
import { fixture } from './fixture-source.js';

describe('indexCodeSystem', () => {
  const shapes = indexCodeSystem(fixture('codesystem-shapes-1.json'));
  const fruit = indexCodeSystem(fixture('codesystem-fruit.json'));

  it('indexes nested concepts with their parents and children', () => {
    expect([...shapes.concepts.keys()]).toEqual([
      'shape',
      'polygon',
      'triangle',
      'square',
      'rhombus',
      'round',
      'circle',
      'ellipse',
    ]);
    expect(shapes.concepts.get('polygon')).toMatchObject({
      parents: ['shape'],
      children: ['triangle', 'square', 'rhombus'],
    });
    expect(shapes).toMatchObject({
      version: '1.0.0',
      held: true,
      isA: true,
      caseSensitive: true,
      versionId: '1',
    });
  });

  it('links parent properties both ways', () => {
    expect(fruit.concepts.get('citrus')).toMatchObject({
      parents: ['fruit'],
      children: ['orange', 'lemon', 'bergamot'],
    });
    expect(closure(fruit, 'fruit', 'down')).toEqual([
      'fruit',
      'citrus',
      'apple',
      'orange',
      'lemon',
      'bergamot',
    ]);
    expect(closure(fruit, 'bergamot', 'up')).toEqual(['bergamot', 'citrus', 'fruit']);
    expect(closure(fruit, 'fruit', 'down', 2)).toHaveLength(3);
  });

  it('reads status, inactive and notSelectable', () => {
    expect(shapes.concepts.get('rhombus')?.inactive).toBe(true);
    expect(fruit.concepts.get('bergamot')?.inactive).toBe(true);
    expect(shapes.concepts.get('shape')?.abstract).toBe(true);
    expect(shapes.concepts.get('square')).toMatchObject({ inactive: false, abstract: false });
    const deprecated = indexCodeSystem({
      resourceType: 'CodeSystem',
      url: 'x',
      content: 'complete',
      concept: [
        { code: 'a', property: [{ code: 'status', valueCode: 'deprecated' }] },
        { code: 'b', property: [{ code: 'deprecated', valueDateTime: '2020-01-01' }] },
        { code: 'c', property: [{ code: 'status', valueCode: 'active' }] },
      ],
    });
    expect([...deprecated.concepts.values()].map((c) => c.inactive)).toEqual([true, true, false]);
  });

  it('finds codes without case in a case-insensitive system only', () => {
    expect(findConcept(fruit, 'LEMON')?.code).toBe('lemon');
    expect(findConcept(shapes, 'SQUARE')).toBeUndefined();
  });

  it('holds complete systems only', () => {
    for (const content of ['not-present', 'example', 'fragment', 'supplement']) {
      expect(indexCodeSystem({ resourceType: 'CodeSystem', url: 'x', content }).held).toBe(false);
    }
    expect(indexCodeSystem({ resourceType: 'CodeSystem', url: 'x', hierarchyMeaning: 'part-of' }).isA).toBe(
      false,
    );
  });

  it('walks a cycle in the data once', () => {
    const cyclic = indexCodeSystem({
      resourceType: 'CodeSystem',
      url: 'x',
      content: 'complete',
      concept: [
        { code: 'a', property: [{ code: 'parent', valueCode: 'b' }] },
        { code: 'b', property: [{ code: 'parent', valueCode: 'a' }] },
      ],
    });
    expect(closure(cyclic, 'a', 'down')).toEqual(['a', 'b']);
  });
});
