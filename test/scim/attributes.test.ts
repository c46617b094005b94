import { describe, expect, it } from 'vitest';
import { parseAttributeList, projectScimAttributes } from '../../src/scim/attributes.js';
import {
  CORE_USER_SCHEMA_ID,
  ENTERPRISE_USER_SCHEMA_ID,
  USER_RESOURCE_SCHEMAS,
} from '../../src/scim/schema.js';
import { ScimError } from '../../src/http/http-error.js';

const user = {
  schemas: [CORE_USER_SCHEMA_ID, ENTERPRISE_USER_SCHEMA_ID],
  id: 'u1',
  externalId: 'e1',
  userName: 'p1',
  userType: 'Patient',
  active: true,
  password: 'never',
  name: { givenName: 'B', familyName: 'J' },
  emails: [{ value: 'b@x.org', type: 'work' }],
  meta: { resourceType: 'User', version: 'W/"1"' },
  [ENTERPRISE_USER_SCHEMA_ID]: { department: 'D', employeeNumber: '7' },
};

const project = (attributes?: string, excludedAttributes?: string) =>
  projectScimAttributes(
    user,
    {
      attributes: parseAttributeList(attributes),
      excludedAttributes: parseAttributeList(excludedAttributes),
    },
    USER_RESOURCE_SCHEMAS,
  );

describe('projectScimAttributes', () => {
  it('returns defaults, never password', () => {
    const out = project();
    expect(out).not.toHaveProperty('password');
    expect(out.userName).toBe('p1');
    expect(out[ENTERPRISE_USER_SCHEMA_ID]).toEqual({ department: 'D', employeeNumber: '7' });
  });

  it('keeps only requested attributes plus id and schemas, case-insensitively', () => {
    expect(project('USERNAME,name.givenName,emails.value')).toEqual({
      schemas: [CORE_USER_SCHEMA_ID],
      id: 'u1',
      userName: 'p1',
      name: { givenName: 'B' },
      emails: [{ value: 'b@x.org' }],
    });
    expect(project(`${ENTERPRISE_USER_SCHEMA_ID}:department`)).toEqual({
      schemas: [CORE_USER_SCHEMA_ID, ENTERPRISE_USER_SCHEMA_ID],
      id: 'u1',
      [ENTERPRISE_USER_SCHEMA_ID]: { department: 'D' },
    });
    expect(project(ENTERPRISE_USER_SCHEMA_ID)[ENTERPRISE_USER_SCHEMA_ID]).toEqual(
      user[ENTERPRISE_USER_SCHEMA_ID],
    );
    expect(project('password')).not.toHaveProperty('password');
  });

  it('drops excluded attributes but never id', () => {
    const out = project(undefined, `id,emails,name.familyName,meta,${ENTERPRISE_USER_SCHEMA_ID}`);
    expect(out.id).toBe('u1');
    expect(out).not.toHaveProperty('emails');
    expect(out).not.toHaveProperty('meta');
    expect(out.name).toEqual({ givenName: 'B' });
    expect(out).not.toHaveProperty(ENTERPRISE_USER_SCHEMA_ID);
    expect(out.schemas).toEqual([CORE_USER_SCHEMA_ID]);
  });

  it('rejects malformed names', () => {
    expect(() => project('user name')).toThrow(ScimError);
    expect(() => parseAttributeList(5)).toThrow(ScimError);
  });
});
