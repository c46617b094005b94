import { describe, expect, it } from 'vitest';
import { capScopes, userRoles } from '../../src/auth/access/group-roles.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage, UserRecord } from '../../src/storage/types.js';

const SCIM_TAG = { system: 'urn:fhir-platform-kit:tag', code: 'scim-managed' };
const NAME_KEY = 'urn:fhir-platform-kit:scim-group-name';

describe('the roles of SCIM Groups: capping scopes', () => {
  it('keeps a user/ scope a cap covers, narrows one it overlaps, drops one outside it', () => {
    expect(capScopes(['user/*.cruds'], ['user/*.rs'])).toEqual({
      scopes: ['user/*.rs'],
      capped: ['user/*.cruds'],
      noData: false,
    });
    expect(capScopes(['user/Observation.rs', 'user/Patient.read'], ['user/*.rs'])).toEqual({
      scopes: ['user/Observation.rs', 'user/Patient.read'],
      capped: [],
      noData: false,
    });
    expect(capScopes(['user/*.rs', 'user/Patient.cruds'], ['user/Observation.cruds'])).toEqual({
      scopes: ['user/Observation.rs'],
      capped: ['user/*.rs', 'user/Patient.cruds'],
      noData: false,
    });
  });

  it('grants within the union of several caps', () => {
    const { scopes, capped } = capScopes(['user/*.cruds'], ['user/*.rs', 'user/Observation.cruds']);
    expect(scopes).toEqual(['user/*.rs', 'user/Observation.cruds']);
    expect(capped).toEqual(['user/*.cruds']);
  });

  it('caps patient/ scopes by the same caps, and keeps the scopes that name no data', () => {
    const asked = ['openid', 'fhirUser', 'launch/patient', 'offline_access', 'patient/*.cruds'];
    expect(capScopes(asked, ['user/Observation.rs'])).toEqual({
      scopes: ['openid', 'fhirUser', 'launch/patient', 'offline_access', 'patient/Observation.rs'],
      capped: ['patient/*.cruds'],
      noData: false,
    });
  });

  it('says when the caps leave none of the data scopes asked for', () => {
    expect(capScopes(['openid', 'user/Patient.rs'], ['user/Observation.cruds'])).toEqual({
      scopes: ['openid'],
      capped: ['user/Patient.rs'],
      noData: true,
    });
    // Nothing to leave: a request without data scopes is not refused.
    expect(capScopes(['openid', 'fhirUser'], ['user/Observation.cruds']).noData).toBe(false);
    // A v2 scope with a query is never granted; capped, it goes.
    expect(capScopes(['user/Observation.rs?category=laboratory'], ['user/*.rs']).noData).toBe(true);
  });
});

describe('the roles of SCIM Groups: the groups of a user', () => {
  async function project(): Promise<{ storage: Storage; user: UserRecord; other: UserRecord }> {
    const storage = memoryStorage();
    await storage.createProject({ id: 'p1', name: 'p1', strictMode: false });
    const make = (id: string) =>
      storage.createUser('p1', {
        id,
        projectId: 'p1',
        userName: id,
        userType: 'Practitioner',
        profileId: `dr-${id}`,
        active: true,
        data: {},
      });
    return { storage, user: await make('u1'), other: await make('u2') };
  }

  /** A SCIM Group as SCIM stores it (name, name key, tag), with these member entries. */
  const group = (storage: Storage, id: string, name: string, member: Record<string, unknown>[], tag = true) =>
    storage.updateResource('p1', {
      resourceType: 'Group',
      id,
      type: 'person',
      actual: true,
      name,
      identifier: [{ system: NAME_KEY, value: name.toLowerCase() }],
      member,
      ...(tag ? { meta: { tag: [SCIM_TAG] } } : {}),
    });
  const entry = (profile: string, extra: Record<string, unknown> = {}) => ({
    entity: { reference: `Practitioner/${profile}` },
    ...extra,
  });

  it('finds the mapped groups a user is an active member of, by name whatever its case', async () => {
    const { storage, user } = await project();
    await storage.updateProject('p1', {
      groupRoles: [
        { group: 'clinicians', scopes: ['user/*.rs'] },
        { group: 'Care team A', scopes: ['user/Observation.cruds', 'user/*.rs'] },
        { group: 'Admins', scopes: ['user/*.cruds'] },
      ],
    });
    expect(await userRoles(storage, user)).toBeUndefined();
    await group(storage, 'g1', 'Clinicians', [entry('dr-u1')]);
    await group(storage, 'g2', 'CARE TEAM A', [entry('dr-u2'), entry('dr-u1')]);
    // Not counted: a group without a role, an inactive membership, a FHIR Group SCIM does not own.
    await group(storage, 'g3', 'Night shift', [entry('dr-u1')]);
    await group(storage, 'g4', 'Admins', [entry('dr-u1', { inactive: true })]);
    await group(storage, 'g5', 'Admins', [entry('dr-u1')], false);
    expect(await userRoles(storage, user)).toEqual({
      groups: ['Clinicians', 'CARE TEAM A'],
      cap: ['user/*.rs', 'user/Observation.cruds'],
    });
  });

  it('caps nobody in a project without roles, nor a user outside every mapped group', async () => {
    const { storage, user, other } = await project();
    await group(storage, 'g1', 'Clinicians', [entry('dr-u1')]);
    expect(await userRoles(storage, user)).toBeUndefined();
    await storage.updateProject('p1', { groupRoles: [{ group: 'Clinicians', scopes: ['user/*.rs'] }] });
    expect(await userRoles(storage, user)).toEqual({ groups: ['Clinicians'], cap: ['user/*.rs'] });
    expect(await userRoles(storage, other)).toBeUndefined();
  });
});
