import { describe, expect, it } from 'vitest';
import {
  intersectScopes,
  parseResourceScope,
  scopeImplied,
  scopesAllow,
} from '../../src/auth/access/scopes.js';
import { canAccess } from '../../src/auth/access/access.js';

describe('SMART scopes', () => {
  it('parses v1 and v2 scopes', () => {
    expect([...parseResourceScope('system/*.read')!.actions].sort()).toEqual(['r', 's']);
    expect([...parseResourceScope('system/Patient.write')!.actions].sort()).toEqual(['c', 'd', 'u']);
    expect([...parseResourceScope('system/*.*')!.actions].sort()).toEqual(['c', 'd', 'r', 's', 'u']);
    expect([...parseResourceScope('system/Observation.rs')!.actions].sort()).toEqual(['r', 's']);
    expect(parseResourceScope('system/Observation.sr')).toBeUndefined();
    expect(parseResourceScope('patient/Observation.read')).toMatchObject({
      context: 'patient',
      resourceType: 'Observation',
    });
    expect([...parseResourceScope('patient/*.cruds')!.actions].sort()).toEqual(['c', 'd', 'r', 's', 'u']);
    expect([...parseResourceScope('user/Patient.write')!.actions].sort()).toEqual(['c', 'd', 'u']);
    expect(parseResourceScope('patient/Observation.rs?category=laboratory')).toBeUndefined();
    expect(parseResourceScope('practitioner/Observation.rs')).toBeUndefined();
    expect(parseResourceScope('launch/patient')).toBeUndefined();
    expect(parseResourceScope('system/Observation.rs?category=lab')).toBeUndefined();
    expect(parseResourceScope('openid')).toBeUndefined();
  });

  it('parses a scope once and shares the frozen result; the longest type name still parses', () => {
    const first = parseResourceScope('system/Encounter.cruds')!;
    expect(parseResourceScope('system/Encounter.cruds')).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(() => {
      (first as { resourceType: string }).resourceType = 'Patient';
    }).toThrow(TypeError);
    const longest = `system/A${'b'.repeat(63)}.cruds`;
    expect(parseResourceScope(longest)?.resourceType).toBe(`A${'b'.repeat(63)}`);
    expect(parseResourceScope(`system/A${'b'.repeat(64)}.cruds`)).toBeUndefined();
    // Many distinct strings (a caller's scope parameter) neither grow the memo without bound nor
    // change what a known scope parses to.
    for (let i = 0; i < 3000; i++) parseResourceScope(`system/Type${i}.rs`);
    expect([...parseResourceScope('system/Encounter.cruds')!.actions].sort()).toEqual([
      'c',
      'd',
      'r',
      's',
      'u',
    ]);
  });

  it('decides per type and action', () => {
    expect(scopesAllow(['system/Observation.read'], 'Observation', 's')).toBe(true);
    expect(scopesAllow(['system/Observation.read'], 'Patient', 'r')).toBe(false);
    expect(scopesAllow(['system/*.rs'], 'Patient', 'c')).toBe(false);
    expect(scopesAllow(['system/*.cruds'], 'Patient', 'd')).toBe(true);
  });

  it('grants the intersection of requested and allowed', () => {
    expect(intersectScopes(['system/*.read'], ['system/*.*'])).toEqual(['system/*.read']);
    expect(intersectScopes(['system/*.*'], ['system/Observation.read'])).toEqual(['system/Observation.rs']);
    expect(intersectScopes(['system/Patient.cruds'], ['system/*.rs'])).toEqual(['system/Patient.rs']);
    expect(intersectScopes(['system/Patient.write'], ['system/*.rs'])).toEqual([]);
    expect(intersectScopes(['openid', 'foo'], ['openid'])).toEqual(['openid']);
  });

  it('grants patient/ and user/ scopes only within the registered ones of the same context', () => {
    const registered = ['patient/*.rs', 'user/Observation.rs', 'launch/patient', 'openid'];
    expect(intersectScopes(['patient/Observation.read'], registered)).toEqual(['patient/Observation.read']);
    expect(intersectScopes(['patient/*.*'], registered)).toEqual(['patient/*.rs']);
    expect(intersectScopes(['user/*.cruds'], registered)).toEqual(['user/Observation.rs']);
    // Never from another context: a registered user/ scope does not grant a patient/ one, nor a
    // system/ one.
    expect(intersectScopes(['patient/Observation.write', 'system/*.rs'], registered)).toEqual([]);
    expect(intersectScopes(['user/Patient.rs'], ['patient/*.*'])).toEqual([]);
    expect(intersectScopes(['launch/patient', 'launch'], registered)).toEqual(['launch/patient']);
    // A v2 restriction is never granted as a resource scope (not enforced here).
    expect(intersectScopes(['patient/Observation.rs?category=laboratory'], registered)).toEqual([]);
  });

  it('says which scopes a grant implies (what a refresh may ask for), in v1 and v2 syntax', () => {
    const v1 = ['patient/*.read', 'launch/patient', 'openid', 'offline_access'];
    for (const scope of ['patient/Observation.read', 'patient/Observation.rs', 'patient/*.s', 'openid']) {
      expect(scopeImplied(v1, scope), scope).toBe(true);
    }
    const v2 = ['patient/*.rs', 'user/Observation.cruds', 'fhirUser'];
    for (const scope of ['patient/Observation.r', 'patient/Patient.read', 'user/Observation.write']) {
      expect(scopeImplied(v2, scope), scope).toBe(true);
    }
    for (const scope of [
      // More actions than granted.
      'patient/Observation.cruds',
      'patient/*.write',
      'patient/*.*',
      // Another context, or another type.
      'user/Patient.rs',
      'system/*.rs',
      'user/Encounter.rs',
      // Other scopes only when granted as written.
      'openid',
      'offline_access',
      'online_access',
      'launch/patient',
      'patient/Observation.rs?category=laboratory',
    ]) {
      expect(scopeImplied(v2, scope), scope).toBe(false);
    }
    expect(scopeImplied(v1, 'fhirUser')).toBe(false);
    expect(scopeImplied([], 'patient/Observation.r')).toBe(false);
  });

  it('counts patient/ scopes only where asked to (a client has no launch patient)', () => {
    expect(scopesAllow(['patient/*.rs'], 'Observation', 'r')).toBe(false);
    expect(scopesAllow(['patient/*.rs'], 'Observation', 'r', ['patient'])).toBe(true);
    expect(scopesAllow(['system/*.rs'], 'Observation', 'r', ['user', 'patient'])).toBe(false);
    // A client token's user/ scopes count as before.
    expect(scopesAllow(['user/*.rs'], 'Observation', 's')).toBe(true);
  });

  it('reads administration scopes as plain scope tokens, never as resource scopes', () => {
    for (const text of ['project:admin', 'platform:admin', 'project:', ':admin', 'system/', 'a/b/c.d', '*']) {
      expect(parseResourceScope(text)).toBeUndefined();
    }
    expect(scopesAllow(['project:admin', 'platform:admin'], 'Patient', 'r')).toBe(false);
    expect(intersectScopes(['project:admin', 'system/*.rs'], ['system/*.*', 'project:admin'])).toEqual([
      'project:admin',
      'system/*.rs',
    ]);
    expect(intersectScopes(['platform:admin'], ['system/*.*', 'project:admin'])).toEqual([]);
  });

  it('decides data access by scopes, for admins too', () => {
    const base = { projectId: 'p', kind: 'client' as const, id: 'c', superAdmin: false };
    const narrowAdmin = { ...base, admin: true, scopes: ['project:admin', 'system/Patient.rs'] };
    expect(canAccess(narrowAdmin, 'Patient', 'read')).toBe(true);
    expect(canAccess(narrowAdmin, 'Patient', 'delete')).toBe(false);
    expect(canAccess(narrowAdmin, 'Observation', 'create')).toBe(false);
    expect(canAccess({ ...base, admin: true, scopes: ['project:admin'] }, 'Patient', 'read')).toBe(false);
    expect(
      canAccess({ ...base, superAdmin: true, admin: false, scopes: ['platform:admin'] }, 'Patient', 'read'),
    ).toBe(false);
    expect(
      canAccess({ ...base, admin: true, scopes: ['system/*.*', 'project:admin'] }, 'Patient', 'delete'),
    ).toBe(true);
    // A host-built admin principal with no scopes at all keeps the whole project (docs/auth.md).
    expect(canAccess({ ...base, kind: 'user', scopes: [], admin: true }, 'Patient', 'delete')).toBe(true);
    expect(canAccess({ ...base, scopes: [], admin: false }, 'Patient', 'read')).toBe(false);
    expect(canAccess({ ...base, scopes: ['system/Patient.rs'], admin: false }, 'Patient', 'delete')).toBe(
      false,
    );
    expect(canAccess({ ...base, scopes: ['system/Patient.rs'], admin: false }, 'Patient', 'read')).toBe(true);
  });
});
