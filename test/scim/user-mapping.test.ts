import { describe, expect, it } from 'vitest';
import { readListQuery } from '../../src/scim/list-query.js';
import { parseEntityTags, entityTagMatches } from '../../src/scim/entity-tags.js';
import { USER_RESOURCE_SCHEMAS, ENTERPRISE_USER_SCHEMA_ID } from '../../src/scim/schema.js';
import { profileResource, scimUserFields, userFilterView, userToScim } from '../../src/scim/user-mapping.js';
import type { UserRecord } from '../../src/storage/types.js';
import { ScimError } from '../../src/http/http-error.js';

const record: UserRecord = {
  id: 'u1',
  projectId: 'p',
  userName: 'alice@x.org',
  externalId: 'e1',
  userType: 'Patient',
  profileId: 'pat-1',
  active: true,
  data: { name: { givenName: 'Alice' }, [ENTERPRISE_USER_SCHEMA_ID]: { department: 'D' } },
  createdAt: '2024-01-01T00:00:00.000Z',
  updatedAt: '2024-01-02T00:00:00.000Z',
  version: 3,
};

describe('user mapping', () => {
  it('reads SCIM bodies into record fields, canonicalizing names and dropping unknowns', () => {
    const fields = scimUserFields({
      UserName: ' bob ',
      USERTYPE: 'relatedperson',
      Active: 'False',
      Name: { GivenName: 'Bob', nickname: 'x' },
      Emails: { value: 'b@x.org' },
      id: 'ignored',
      meta: { created: 'x' },
      groups: [{ value: 'g' }],
      password: 'secret',
      unknownThing: 1,
      'urn:ietf:params:scim:schemas:extension:enterprise:2.0:user': { Department: 'D', nope: 1 },
    });
    expect(fields).toEqual({
      userName: 'bob',
      userType: 'RelatedPerson',
      active: false,
      data: {
        name: { givenName: 'Bob' },
        emails: [{ value: 'b@x.org' }],
        [ENTERPRISE_USER_SCHEMA_ID]: { department: 'D' },
      },
    });
    expect(() => scimUserFields({ userType: 'Patient', emails: 'x' })).not.toThrow();
    expect(() => scimUserFields({ userType: 'Patient', name: 'x' })).toThrow(ScimError);
    expect(() => scimUserFields(null)).toThrow(ScimError);
  });

  it('renders userName as the profile id unless echoing, and filters by both', () => {
    expect(userToScim(record, { location: 'L', echoUserName: false })).toMatchObject({
      userName: 'pat-1',
      meta: { version: 'W/"3"', location: 'L', created: record.createdAt, lastModified: record.updatedAt },
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User', ENTERPRISE_USER_SCHEMA_ID],
    });
    expect(userToScim(record, { location: 'L', echoUserName: true }).userName).toBe('alice@x.org');
    expect(userFilterView(record, 'L').userName).toEqual(['alice@x.org', 'pat-1']);
  });

  it('builds the profile resource, keeping elements the mapping does not own', () => {
    const existing = {
      resourceType: 'Patient',
      id: 'pat-1',
      meta: { versionId: '1', lastUpdated: 'x' },
      birthDate: '1990-01-01',
      telecom: [
        { system: 'phone', value: '555' },
        { system: 'email', value: 'old@x.org' },
      ],
    };
    const profile = profileResource(
      'Patient',
      {
        name: { givenName: 'A', middleName: 'B', familyName: 'C', formatted: 'A B C' },
        emails: [{ value: 'n@x.org' }],
      },
      existing,
    );
    expect(profile).toEqual({
      resourceType: 'Patient',
      id: 'pat-1',
      birthDate: '1990-01-01',
      name: [{ use: 'official', text: 'A B C', family: 'C', given: ['A', 'B'] }],
      telecom: [
        { system: 'phone', value: '555' },
        { system: 'email', value: 'n@x.org' },
      ],
    });
    expect(profileResource('Practitioner', {})).toEqual({ resourceType: 'Practitioner' });
  });
});

describe('list query', () => {
  const read = (params: Record<string, unknown>) => readListQuery(params, USER_RESOURCE_SCHEMAS, 50);
  it('clamps paging', () => {
    expect(read({})).toMatchObject({ startIndex: 1, count: 50, descending: false });
    expect(read({ startIndex: '-3', count: '-1' })).toMatchObject({ startIndex: 1, count: 0 });
    expect(read({ STARTINDEX: '7', Count: '500' })).toMatchObject({ startIndex: 7, count: 50 });
    expect(read({ sortBy: 'name.familyName', sortOrder: 'Descending' }).descending).toBe(true);
  });
  it('rejects malformed parameters', () => {
    expect(() => read({ count: '1.5' })).toThrow(ScimError);
    expect(() => read({ startIndex: ['1', '2'] })).toThrow(ScimError);
    expect(() => read({ filter: 'userName eq' })).toThrow(ScimError);
    expect(() => read({ sortBy: 'a b' })).toThrow(ScimError);
  });
});

describe('entity tags', () => {
  it('parses weak and strong tags and *', () => {
    expect(parseEntityTags('W/"3", "4"')).toEqual([3, 4]);
    expect(parseEntityTags('*')).toBe('*');
    expect(parseEntityTags(undefined)).toBeUndefined();
    expect(entityTagMatches(parseEntityTags('"x"')!, 1)).toBe(false);
  });
});
