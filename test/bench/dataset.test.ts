import { describe, expect, it } from 'vitest';
import { generatePatients, RESOURCES_PER_PATIENT } from '../../bench/dataset.js';

describe('benchmark dataset generator', () => {
  it('is deterministic, Observation-heavy and about 400 resources per patient', () => {
    const a = [...generatePatients(2, 7)];
    const b = [...generatePatients(2, 7)];
    expect(a).toEqual(b);
    expect(a).toHaveLength(2 * RESOURCES_PER_PATIENT);
    expect(RESOURCES_PER_PATIENT).toBeGreaterThan(380);
    expect(RESOURCES_PER_PATIENT).toBeLessThan(420);
    const observations = a.filter((r) => r.resourceType === 'Observation').length;
    expect(observations / a.length).toBeGreaterThan(0.4);
    const ids = new Set(a.map((r) => `${String(r.resourceType)}/${String(r.id)}`));
    expect(ids.size).toBe(a.length);
    const other = [...generatePatients(1, 8)];
    expect(other[0]!.id).not.toBe(a[0]!.id);
  });
});
