import { describe, expect, it } from 'vitest';
import { R4_RESOURCE_TYPES, isResourceType, isValidId } from '../../src/common/resource-types.js';

describe('resource types', () => {
  it('knows the 146 R4 types, case-sensitively', () => {
    expect(R4_RESOURCE_TYPES.length).toBe(146);
    expect(isResourceType('Patient')).toBe(true);
    expect(isResourceType('MedicinalProductUndesirableEffect')).toBe(true);
    expect(isResourceType('patient')).toBe(false);
    expect(isResourceType('SubscriptionStatus')).toBe(false);
    expect(isResourceType('Resource')).toBe(false);
    expect(isResourceType(undefined)).toBe(false);
    expect(isResourceType('constructor')).toBe(false);
  });

  it('checks the id syntax', () => {
    expect(isValidId('abc-123.X')).toBe(true);
    expect(isValidId('a'.repeat(64))).toBe(true);
    expect(isValidId('a'.repeat(65))).toBe(false);
    expect(isValidId('')).toBe(false);
    expect(isValidId('a_b')).toBe(false);
    expect(isValidId('a/b')).toBe(false);
    expect(isValidId(12)).toBe(false);
  });
});
