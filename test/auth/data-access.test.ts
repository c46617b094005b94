import { describe, expect, it } from 'vitest';
import { canAccess } from '../../src/auth/access/access.js';
import { dataAccess, limitCompartment } from '../../src/auth/access/data-access.js';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import type { Principal } from '../../src/http/principal.js';
import type { FhirResource } from '../../src/storage/types.js';

const user = (fhirUser: string, scopes: string[], patientId?: string): Principal => ({
  projectId: 'p',
  kind: 'user',
  id: 'u',
  scopes,
  admin: false,
  superAdmin: false,
  clientId: 'app',
  fhirUser,
  ...(patientId !== undefined ? { patientId } : {}),
});

const profiles: Record<string, FhirResource> = {
  'RelatedPerson/rp': { resourceType: 'RelatedPerson', id: 'rp', patient: { reference: 'Patient/kid' } },
  'RelatedPerson/alone': { resourceType: 'RelatedPerson', id: 'alone' },
};

function accessOf(principal: Principal, reads: string[] = []) {
  return dataAccess(principal, R4_PATIENT_COMPARTMENT, (type, id) => {
    reads.push(`${type}/${id}`);
    return Promise.resolve(profiles[`${type}/${id}`]);
  });
}

const observation = (patient: string): FhirResource => ({
  resourceType: 'Observation',
  id: `o-${patient}`,
  subject: { reference: `Patient/${patient}` },
});

describe('dataAccess', () => {
  it('is none of the business of clients, admins and host-built users', () => {
    const client: Principal = {
      projectId: 'p',
      kind: 'client',
      id: 'c',
      scopes: ['user/*.rs'],
      admin: false,
      superAdmin: false,
    };
    expect(accessOf(client)).toBeUndefined();
    expect(accessOf({ ...client, kind: 'user' })).toBeUndefined();
    expect(accessOf({ ...user('Patient/me', []), admin: true })).toBeUndefined();
  });

  it('limits user/ scopes to what the user may see, by profile type', async () => {
    expect(await accessOf(user('Patient/me', ['user/*.rs']))!.limit('Observation', 'search')).toEqual(['me']);
    expect(
      await accessOf(user('Practitioner/doc', ['user/*.rs']))!.limit('Observation', 'read'),
    ).toBeUndefined();
    expect(await accessOf(user('Device/d', ['user/*.rs']))!.limit('Observation', 'read')).toEqual([]);
    const reads: string[] = [];
    const related = accessOf(user('RelatedPerson/rp', ['user/*.rs']), reads)!;
    expect(await related.limit('Observation', 'read')).toEqual(['kid']);
    expect(await related.limit('Condition', 'search')).toEqual(['kid']);
    expect(reads).toEqual(['RelatedPerson/rp']);
    expect(await accessOf(user('RelatedPerson/alone', ['user/*.rs']))!.limit('Observation', 'read')).toEqual(
      [],
    );
  });

  it('limits patient/ scopes to the launch patient, and adds them to user/ ones', async () => {
    const doc = accessOf(user('Practitioner/doc', ['patient/*.rs', 'user/Practitioner.rs'], 'p1'))!;
    expect(await doc.limit('Observation', 'read')).toEqual(['p1']);
    expect(await doc.limit('Practitioner', 'read')).toBeUndefined();
    const both = accessOf(user('Patient/me', ['user/*.rs', 'patient/Observation.rs'], 'other'))!;
    expect(await both.limit('Observation', 'read')).toEqual(['me', 'other']);
    expect(await both.limit('Condition', 'read')).toEqual(['me']);
    // No launch patient: patient/ scopes reach nothing, and canAccess refuses the type.
    const none = user('Practitioner/doc', ['patient/*.rs']);
    expect(await accessOf(none)!.limit('Observation', 'read')).toEqual([]);
    expect(canAccess(none, 'Observation', 'read')).toBe(false);
    expect(canAccess({ ...none, patientId: 'p1' }, 'Observation', 'read')).toBe(true);
  });

  it('ignores system/ scopes in a user token', () => {
    expect(canAccess(user('Practitioner/doc', ['system/*.*']), 'Observation', 'read')).toBe(false);
    expect(canAccess(user('Practitioner/doc', ['user/Observation.rs']), 'Observation', 'read')).toBe(true);
    expect(canAccess(user('Practitioner/doc', ['user/*.*']), 'AuditEvent', 'read')).toBe(false);
  });

  it('permits a resource in one of the compartments, and the own profile with a user/ scope of its type', async () => {
    const me = accessOf(user('Patient/me', ['user/*.rs']))!;
    expect(await me.permits(observation('me'), 'read')).toBe(true);
    expect(await me.permits(observation('you'), 'read')).toBe(false);
    expect(await me.permits({ resourceType: 'Medication', id: 'm' }, 'read')).toBe(false);
    const related = accessOf(user('RelatedPerson/rp', ['user/RelatedPerson.rs']))!;
    expect(await related.permits(profiles['RelatedPerson/rp']!, 'read')).toBe(true);
    const alone = accessOf(user('RelatedPerson/alone', ['user/RelatedPerson.rs']))!;
    expect(await alone.permits(profiles['RelatedPerson/alone']!, 'read')).toBe(true);
    expect(await alone.permits(profiles['RelatedPerson/alone']!, 'update')).toBe(false);
  });

  it('narrows a query compartment to the limit', () => {
    expect(limitCompartment(undefined, undefined)).toBeUndefined();
    expect(limitCompartment(['a'], undefined)).toEqual(['a']);
    expect(limitCompartment(undefined, ['a'])).toEqual(['a']);
    expect(limitCompartment(['a', 'b'], ['b', 'c'])).toEqual(['b']);
    const none = limitCompartment(['a'], ['b']);
    expect(none).toHaveLength(1);
    expect(none![0]).not.toMatch(/^[A-Za-z0-9\-.]{1,64}$/);
    expect(limitCompartment(undefined, [])).toEqual(none);
  });
});
