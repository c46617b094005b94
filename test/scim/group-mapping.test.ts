// The SCIM Group <-> FHIR Group mapping, without HTTP or a store.
import { describe, expect, it } from 'vitest';
import {
  groupResource,
  groupToScim,
  groupWithMembers,
  newMemberEntry,
  scimGroupFields,
} from '../../src/scim/group-mapping.js';
import { ScimError } from '../../src/http/http-error.js';
import type { StoredResource, UserRecord } from '../../src/storage/types.js';

const user = (id: string, active = true, data: Record<string, unknown> = {}): UserRecord => ({
  id,
  projectId: 'p',
  userName: `${id}@example.org`,
  userType: 'Patient',
  profileId: `pr-${id}`,
  active,
  data,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
  version: 1,
});

const stored = (resource: Record<string, unknown>, versionId = '1'): StoredResource =>
  ({
    ...resource,
    id: 'g1',
    meta: { ...(resource.meta as object), versionId, lastUpdated: `2026-01-0${versionId}T00:00:00.000000Z` },
  }) as StoredResource;

describe('scimGroupFields', () => {
  it('reads displayName, externalId and members, dropping duplicates and readOnly values', () => {
    expect(
      scimGroupFields({
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
        id: 'ignored',
        DisplayName: '  Nurses ',
        externalId: '',
        members: [
          { value: 'u1', display: 'One', type: 'User' },
          { value: 'u2', type: 'user' },
          { value: 'u1' },
        ],
        meta: { resourceType: 'Group' },
      }),
    ).toEqual({ displayName: 'Nurses', members: [{ value: 'u1', display: 'One' }, { value: 'u2' }] });
  });

  it.each([
    [{}],
    [{ displayName: '' }],
    [{ displayName: 'G', members: [{ display: 'no value' }] }],
    [{ displayName: 'G', members: [{ value: 'g2', type: 'Group' }] }],
    [{ displayName: 'G', members: [{ value: true }] }],
  ])('refuses %j with 400 invalidValue', (body) => {
    expect(() => scimGroupFields(body)).toThrow(
      expect.objectContaining({ status: 400, scimType: 'invalidValue' }),
    );
    expect(() => scimGroupFields(body)).toThrow(ScimError);
  });
});

describe('the FHIR Group of a SCIM Group', () => {
  it('maps both ways and keeps the creation time across versions', () => {
    const members = [
      newMemberEntry(user('u1', true, { displayName: 'One' }), undefined, '2026-01-01T00:00:00.000Z'),
      newMemberEntry(user('u2', false), 'Two', '2026-01-01T00:00:00.000Z'),
    ];
    const first = stored(groupResource({ displayName: 'Nurses', externalId: 'x' }, members));
    expect(first).toMatchObject({
      resourceType: 'Group',
      type: 'person',
      actual: true,
      name: 'Nurses',
      quantity: 2,
      identifier: [
        { system: 'urn:fhir-platform-kit:scim-group-name', value: 'nurses' },
        { system: 'urn:fhir-platform-kit:scim-external-id', value: 'x' },
      ],
      member: [
        { entity: { reference: 'Patient/pr-u1', display: 'One' } },
        { entity: { reference: 'Patient/pr-u2', display: 'Two' }, inactive: true },
      ],
    });
    const links = { location: 'https://x/Groups/g1', userUrl: (id: string) => `https://x/Users/${id}` };
    expect(groupToScim(first, links)).toEqual({
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      id: 'g1',
      externalId: 'x',
      displayName: 'Nurses',
      members: [
        { value: 'u1', $ref: 'https://x/Users/u1', display: 'One', type: 'User' },
        { value: 'u2', $ref: 'https://x/Users/u2', display: 'Two', type: 'User' },
      ],
      meta: {
        resourceType: 'Group',
        created: '2026-01-01T00:00:00.000000Z',
        lastModified: '2026-01-01T00:00:00.000000Z',
        location: 'https://x/Groups/g1',
        version: 'W/"1"',
      },
    });
    const second = stored(groupWithMembers(first, [members[1]!]), '2');
    const third = stored(groupResource({ displayName: 'Nurses' }, [], second), '3');
    expect(groupToScim(third, links)).toMatchObject({
      meta: { created: '2026-01-01T00:00:00.000000Z', version: 'W/"3"' },
    });
    expect(groupToScim(third, links)).not.toHaveProperty('members');
    expect(third).not.toHaveProperty('member');
    expect(second.quantity).toBe(1);
  });
});
